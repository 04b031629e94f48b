"""The device registry through the real server (docs/devices.md): a device's life from its first
launch — no login, no push permission — through its token, logins of two users, a second
device, token rotation, an expired session and a logout, with every notification checked at the
APNs and FCM stand-ins (Tests/wire/push/); custom notifications; who may see and change a
device through the push transports; and tokens that move between devices. The registry's rules
(who may see and change a device, bad input, limits, removal, RegisterDevice) are in
test_devices_rules.py."""

import json
import os
import uuid

import pytest

from conftest import Dataset, Server, new_id
from devices_env import Caller, hex_apns_token, mint_session
from push.webhook import verify_signature
from push_env import ACCOUNT, ARN_APNS, ARN_GCM, WEBHOOK_SECRET, PushBed, cli, status, wait_until

ARN_WEBHOOK = f"arn:aws:sns:us-east-1:{ACCOUNT}:app/WEBHOOK/SyncApp"
HOOK_PATH = "/device-hooks"
RNF = "ResourceNotFoundException"
BAD = "InvalidParameterException"
LIMIT = "LimitExceededException"
DENIED = "NotAuthorizedException"


# -- a push test bed of our own (the stand-ins of Tests/wire/push, one server for this module) --

@pytest.fixture(scope="module")
def bed(tmp_root):
    bed = PushBed(os.path.join(tmp_root, "devices-push-bed"))
    yield bed
    bed.stop()


@pytest.fixture(scope="module")
def push_server(tmp_root, bed):
    server = Server(os.path.join(tmp_root, "devices-push-data"), ["--fast", *bed.server_args()])
    bed.configure(server)
    # WEBHOOK devices: the pool's webhook transport for the WEBHOOK platform.
    cli(server, "push", "configure", "webhook", "--arn", ARN_WEBHOOK, "--url", bed.webhook.url + HOOK_PATH,
        "--secret-file", bed.secret_file)
    yield server
    server.stop()


@pytest.fixture
def push_pool(push_server, bed):
    """A fresh pool with push sync on (APNs, FCM, WEBHOOK), and clean stand-ins."""
    bed.reset()
    pool = new_id()
    push_server.client().set_identity_pool_configuration(
        IdentityPoolId=pool, PushSync={"ApplicationArns": [ARN_APNS, ARN_GCM, ARN_WEBHOOK]})
    yield pool
    bed.reset()


def cognito_data(pool, identity, dataset, sync_count):
    return {"source": "cognito-sync", "identityPoolId": pool, "identityId": identity, "datasetName": dataset,
            "syncCount": str(sync_count)}


def put(caller, dataset, values):
    """UpdateRecords through boto3 with the identity's own credential (no DeviceId: every
    device of the identity is told); returns the dataset's new sync count."""
    out = Dataset(caller.boto(), caller.pool, caller.identity).put(dataset, values)
    return max(r["SyncCount"] for r in out["Records"])


def queued(server):
    """How many notifications the outbox has taken so far, per transport."""
    transports = status(server)["transports"]
    return {name: transports[name]["queued"] for name in ("apns", "fcm", "webhook")}


def derived(server):
    """Waits until the push dispatcher has read every commit made so far (so every
    notification those commits call for is in the outbox); returns the counts queued."""
    target = status(server)["lastSequence"]
    wait_until(lambda: status(server)["cursor"] >= target, what=f"the push dispatcher to read up to commit {target}")
    return queued(server)


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


def apns_log(bed):
    """Every notification the APNs stand-in accepted: (token, identity, dataset, sync count)."""
    return [(r.token, r.payload["data"]["identityId"], r.payload["data"]["datasetName"], r.payload["data"]["syncCount"])
            for r in bed.apns.received]


def fcm_log(bed):
    return [(r.token, r.data["identityId"], r.data["datasetName"], r.data["syncCount"]) for r in bed.fcm.received]


def note(token, identity, dataset, count):
    return (token, identity, dataset, str(count))


# -- the life cycle -------------------------------------------------------------------------

def test_a_device_lives_through_install_token_logins_rotation_logout_and_another_user(push_server, bed, push_pool):
    pool = push_pool
    alice_id, bob_id = new_id(), new_id()
    alice = Caller.of(push_server, pool, alice_id)
    bob = Caller.of(push_server, pool, bob_id)

    # 1. First launch: the app's install identity (nobody logged in) registers the phone; the
    #    user has not allowed notifications yet, so there is no token.
    install = Caller.of(push_server, pool, new_id())
    phone = install.new_device("APNS", Settings={"theme": "dark"})
    assert uuid.UUID(phone).version == 4 and phone == phone.lower(), phone
    first = install.describe(phone)
    assert {k: first[k] for k in ("DeviceCode", "Platform", "OsVersion", "AppVersion", "Model", "Locale", "Settings")} == {
        "DeviceCode": phone, "Platform": "APNS", "OsVersion": "17.4.1", "AppVersion": "3.2.0", "Model": "iPhone15,2",
        "Locale": "de_CH", "Settings": {"theme": "dark"}}
    assert (first["LoggedIn"], first["HasToken"], first["PushEnabled"]) == (False, False, False), first
    assert first.get("IdentityId") is None and first.get("TokenRegisteredDate") is None, first
    # The next launch after an app update: same code, the fields sent win, the rest stay.
    assert install.sync(DeviceCode=phone, AppVersion="3.3.0", Settings={"theme": "light", "sound": "off"}) == phone
    updated = install.describe(phone)
    assert (updated["AppVersion"], updated["OsVersion"], updated["Settings"]) == ("3.3.0", "17.4.1", {"sound": "off", "theme": "light"})
    assert updated["CreationDate"] == first["CreationDate"] and updated["LastModifiedDate"] >= first["LastModifiedDate"]

    # 2. The user allows notifications: the token arrives (upper case, as iOS gives it).
    token1 = hex_apns_token()
    install.sync_token(phone, token1)
    raw = install.call("GET", "/devices/" + phone)
    with_token = raw.json()["Device"]
    assert (with_token["HasToken"], with_token["PushEnabled"], with_token["LoggedIn"]) == (True, True, False), with_token
    assert with_token["TokenRegisteredDate"] >= first["CreationDate"]
    assert token1 not in raw.text and token1.lower() not in raw.text  # a token is never shown

    # 3. Alice logs in on the phone.
    linked = alice.login(phone)
    assert (linked["IdentityId"], linked["LoggedIn"], linked["SubscribeAll"], linked["HasToken"]) == (alice_id, True, True, True)
    assert set(alice.devices()) == {phone}

    # 4. Alice's second device, an Android tablet, logged in with a session credential that
    #    expires in two seconds.
    tablet_install = Caller.of(push_server, pool, new_id())
    tablet = tablet_install.new_device("GCM", Model="Pixel Tablet", OsVersion="14")
    fcm_token = "fcm-" + uuid.uuid4().hex
    tablet_install.sync_token(tablet, fcm_token)
    alice_session = Caller.of(push_server, pool, alice_id, cred=mint_session(push_server, pool, alice_id, 2))
    assert alice_session.login(tablet)["IdentityId"] == alice_id
    assert set(alice.devices()) == {phone, tablet}

    # 5. A change of Alice's dataset reaches both devices.
    c1 = put(alice, "settings", {"theme": "dark"})
    [on_phone] = bed.apns.wait_for(lambda r: r.token == token1.lower())
    assert on_phone.payload == {"aps": {"content-available": 1}, "data": cognito_data(pool, alice_id, "settings", c1)}
    [on_tablet] = bed.fcm.wait_for(lambda r: r.token == fcm_token)
    assert on_tablet.data == cognito_data(pool, alice_id, "settings", c1)

    # 6. The phone's token rotates (an OS update): the new token hears the next change, the old
    #    one does not; the code, the login and SubscribeAll stay.
    token2 = hex_apns_token()
    alice.sync_token(phone, token2)
    rotated = alice.describe(phone)
    assert (rotated["DeviceCode"], rotated["IdentityId"], rotated["SubscribeAll"], rotated["HasToken"]) == (phone, alice_id, True, True)
    c2 = put(alice, "settings", {"theme": "light"})
    bed.apns.wait_for(lambda r: r.token == token2.lower() and r.payload["data"]["syncCount"] == str(c2))
    bed.fcm.wait_for(lambda r: r.token == fcm_token and r.data["syncCount"] == str(c2))

    # 7. Alice's session credential expires: the tablet keeps hearing her changes. She logs out
    #    on the phone: it stays registered with its token and stops hearing them.
    wait_until(lambda: alice_session.call("GET", "/devices").status_code == 403, timeout=10,
               what="Alice's two-second session credential to expire")
    out = alice.logout(phone)
    assert (out["LoggedIn"], out["HasToken"], out["PushEnabled"], out.get("IdentityId")) == (False, True, True, None), out
    assert set(alice.devices()) == {tablet}
    assert install.describe(phone)["HasToken"] is True  # still registered, for its owner
    before = derived(push_server)
    c3 = put(alice, "settings", {"theme": "blue"})
    bed.fcm.wait_for(lambda r: r.token == fcm_token and r.data["syncCount"] == str(c3))
    assert delta(derived(push_server), before) == {"apns": 0, "fcm": 1, "webhook": 0}

    # 8. Bob logs in on the phone: his changes reach it, Alice's reach only her tablet.
    assert bob.login(phone)["IdentityId"] == bob_id
    assert set(bob.devices()) == {phone} and set(alice.devices()) == {tablet}
    alice.refused("GET", "/devices/" + phone, b"", RNF, 404)  # no longer hers to see
    before = derived(push_server)
    c4 = put(alice, "settings", {"theme": "red"})
    b1 = put(bob, "settings", {"theme": "green"})
    bed.apns.wait_for(lambda r: r.token == token2.lower() and r.payload["data"]["identityId"] == bob_id)
    bed.fcm.wait_for(lambda r: r.token == fcm_token and r.data["syncCount"] == str(c4))
    assert delta(derived(push_server), before) == {"apns": 1, "fcm": 1, "webhook": 0}

    # 9. Bob also logs in on the tablet while Alice still is: she is logged out of it first.
    assert bob.login(tablet)["IdentityId"] == bob_id
    assert alice.devices() == {} and set(bob.devices()) == {phone, tablet}
    before = derived(push_server)
    put(alice, "settings", {"theme": "grey"})
    b2 = put(bob, "settings", {"theme": "black"})
    bed.apns.wait_for(lambda r: r.token == token2.lower() and r.payload["data"]["syncCount"] == str(b2))
    bed.fcm.wait_for(lambda r: r.token == fcm_token and r.data["identityId"] == bob_id)
    assert delta(derived(push_server), before) == {"apns": 1, "fcm": 1, "webhook": 0}

    # The whole life, as the push services saw it: each token heard exactly the identity logged
    # in on its device at the time, once per change.
    assert apns_log(bed) == [note(token1.lower(), alice_id, "settings", c1), note(token2.lower(), alice_id, "settings", c2),
                             note(token2.lower(), bob_id, "settings", b1), note(token2.lower(), bob_id, "settings", b2)]
    assert fcm_log(bed) == [note(fcm_token, alice_id, "settings", c) for c in (c1, c2, c3, c4)] + [note(fcm_token, bob_id, "settings", b2)]
    assert not bed.apns.invalid and not bed.fcm.invalid


def test_a_token_seen_on_another_device_moves_there_and_a_removed_token_hears_nothing(push_server, bed, push_pool):
    alice = Caller.of(push_server, push_pool, new_id())
    old, new = alice.new_device("APNS"), alice.new_device("APNS")
    alice.login(old)
    alice.login(new)
    token = hex_apns_token()
    alice.sync_token(old, token)
    # A reinstall: the same token (in lower case this time) shows up under a new device code.
    alice.sync_token(new, token.lower())
    assert (alice.describe(old)["HasToken"], alice.describe(new)["HasToken"]) == (False, True)
    before = derived(push_server)
    count = put(alice, "d", {"k": "1"})
    bed.apns.wait_for(lambda r: r.token == token.lower())
    assert delta(derived(push_server), before)["apns"] == 1  # one device has it, one notification
    assert [r.token for r in bed.apns.requests] == [token.lower()]
    assert bed.apns.received[0].payload["data"]["syncCount"] == str(count)

    # A token taken away (null): the device stays logged in and hears nothing.
    alice.sync_token(new, None)
    gone = alice.describe(new)
    assert (gone["HasToken"], gone["PushEnabled"], gone["LoggedIn"]) == (False, False, True), gone
    before = derived(push_server)
    put(alice, "d", {"k": "2"})
    assert delta(derived(push_server), before) == {"apns": 0, "fcm": 0, "webhook": 0}
    assert len(bed.apns.requests) == 1


def test_a_custom_notification_reaches_every_linked_device_with_a_live_token(push_server, bed, push_pool):
    pool = push_pool
    alice_id = new_id()
    alice, bob = Caller.of(push_server, pool, alice_id), Caller.of(push_server, pool, new_id())
    admin = Caller.admin(push_server)
    phone, tablet, web = alice.new_device("APNS"), alice.new_device("GCM"), alice.new_device("WEBHOOK")
    watch, spare = alice.new_device("APNS"), alice.new_device("APNS")  # no token / logged out
    phone_token, tablet_token = hex_apns_token(), "fcm-" + uuid.uuid4().hex
    web_path = f"{HOOK_PATH}/{uuid.uuid4().hex}"
    spare_token = hex_apns_token()
    for code, token in ((phone, phone_token), (tablet, tablet_token), (web, bed.webhook.url + web_path), (spare, spare_token)):
        alice.sync_token(code, token)
    for code in (phone, tablet, web, watch, spare):
        alice.login(code)
    alice.logout(spare)
    bobs = bob.new_device("APNS")
    bob.sync_token(bobs, hex_apns_token())
    bob.login(bobs)

    data = {"kind": "promotion", "campaign": "spring-2026", "text": "Grüezi ✓"}
    before = queued(push_server)
    out = admin.ok("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": alice_id, "Data": data})
    assert out["DeviceCount"] == 3 and uuid.UUID(out["NotificationId"]), out
    [apns] = bed.apns.wait_for(lambda r: r.token == phone_token.lower())
    assert apns.payload == {"aps": {"content-available": 1}, "data": data}
    [fcm] = bed.fcm.wait_for(lambda r: r.token == tablet_token)
    assert fcm.data == data
    [hook] = bed.webhook.wait_for(lambda r: (r.payload or {}).get("deviceId") == web)
    assert hook.path == web_path  # the device's own address (under the transport's URL)
    assert hook.payload == {**data, "deviceId": web, "platform": "WEBHOOK", "token": bed.webhook.url + web_path}
    assert verify_signature(WEBHOOK_SECRET, hook.headers["x-syncledger-timestamp"], hook.body,
                            hook.headers["x-syncledger-signature"])
    # Queued when the call returned: one per device with a live token, none for the watch (no
    # token), the logged-out spare or Bob's device.
    assert delta(queued(push_server), before) == {"apns": 1, "fcm": 1, "webhook": 1}
    wait_until(lambda: status(push_server)["transports"]["apns"]["pending"] == 0, what="the APNs outbox to empty")
    assert {r.token for r in bed.apns.requests} == {phone_token.lower()}

    # Admin only; typed refusals for bad data.
    alice.refused("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": alice_id, "Data": data}, DENIED, 403)
    for body, code in (({"IdentityPoolId": pool, "IdentityId": alice_id, "Data": {}}, BAD),
                       ({"IdentityPoolId": pool, "IdentityId": alice_id}, BAD),
                       ({"IdentityPoolId": pool, "Data": data}, BAD),
                       ({"IdentityPoolId": pool, "IdentityId": alice_id, "Data": {"n": 1}}, BAD),
                       ({"IdentityPoolId": pool, "IdentityId": alice_id, "Data": ["a"]}, BAD),
                       ({"IdentityPoolId": pool, "IdentityId": alice_id, "Data": {"big": "x" * 4097}}, LIMIT),
                       ({"IdentityPoolId": new_id(), "IdentityId": alice_id, "Data": data}, BAD)):  # no push in that pool
        admin.refused("POST", "/devices/notify", body, code, 400)
    # An identity without devices: nothing to send.
    assert admin.ok("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": new_id(), "Data": data})["DeviceCount"] == 0
    assert delta(queued(push_server), before) == {"apns": 1, "fcm": 1, "webhook": 1}


def test_a_webhook_device_is_posted_at_its_own_address_only_under_the_transports_url(push_server, bed, push_pool):
    alice = Caller.of(push_server, push_pool, new_id())
    relay, stray, lookalike = (alice.new_device("WEBHOOK", Model=m) for m in ("relay", "stray", "lookalike"))
    address = f"{bed.webhook.url}{HOOK_PATH}/{uuid.uuid4().hex}"
    alice.sync_token(relay, address)
    # Addresses a token may hold (any http(s) URL) but delivery refuses: another host, and a
    # path that only starts with the same letters.
    alice.sync_token(stray, "https://relay.example.com/" + uuid.uuid4().hex)
    alice.sync_token(lookalike, f"{bed.webhook.url}{HOOK_PATH}-evil/{uuid.uuid4().hex}")
    for code in (relay, stray, lookalike):
        alice.login(code)
    count = put(alice, "notes", {"n": "1"})
    [hook] = bed.webhook.wait_for(lambda r: (r.payload or {}).get("deviceId") == relay)
    assert hook.path == address[len(bed.webhook.url):]
    assert hook.payload == {**cognito_data(push_pool, alice.identity, "notes", count), "deviceId": relay,
                            "platform": "WEBHOOK", "token": address}
    # The other two are dead letters that say why — not silent drops, and never sent anywhere.
    letters = wait_until(lambda: (lambda ls: ls if len(ls) == 2 else None)(
        [json.loads(line) for line in cli(push_server, "push", "dead-letters", "--identity-pool-id", push_pool, "--json").stdout.splitlines()]),
        what="two dead letters")
    assert {l["deviceId"] for l in letters} == {stray, lookalike}
    assert all("not under the transport's URL" in l["lastError"] for l in letters), letters
    assert [r.path for r in bed.webhook.requests] == [hook.path]


def test_a_webhook_address_that_could_leave_the_transports_path_is_never_posted(push_server, bed, push_pool):
    """Issue 22, item 6a: dot segments (also percent-encoded, any case), encoded slashes, a query
    or a fragment could make a device's address leave the transport's path on the way (a client
    or proxy resolving `..`, a server decoding `%2e%2e`): delivery refuses them all."""
    alice = Caller.of(push_server, push_pool, new_id())
    base = bed.webhook.url + HOOK_PATH
    escapes = [f"{base}/../elsewhere", f"{base}/%2e%2e/elsewhere", f"{base}/%2E%2e/elsewhere", f"{base}/.%2E/elsewhere",
               f"{base}/a/../../elsewhere", f"{base}/./x", f"{base}/x/..", f"{base}/%2e", f"{base}/..%2felsewhere",
               f"{base}/%2e%2e%2Felsewhere", f"{base}/x%5c..%5celsewhere", f"{base}/x?next=/elsewhere", f"{base}/x#elsewhere",
               f"{base}/x?", f"{base}/..;/elsewhere"]
    fine = f"{base}/{uuid.uuid4().hex}/v1..2/...x"  # dots inside a segment are no dot segment
    codes = {}
    for address in escapes + [fine]:
        code = alice.new_device("WEBHOOK")
        alice.sync_token(code, address)
        alice.login(code)
        codes[code] = address
    count = put(alice, "notes", {"n": "1"})
    [ok] = [code for code, a in codes.items() if a == fine]
    [hook] = bed.webhook.wait_for(lambda r: (r.payload or {}).get("deviceId") == ok)
    assert hook.path == fine[len(bed.webhook.url):] and hook.payload["syncCount"] == str(count)
    letters = wait_until(lambda: (lambda ls: ls if len(ls) >= len(escapes) else None)(
        [json.loads(line) for line in cli(push_server, "push", "dead-letters", "--identity-pool-id", push_pool, "--json").stdout.splitlines()]),
        what=f"{len(escapes)} dead letters")
    assert {l["deviceId"]: codes[l["deviceId"]] for l in letters} == {c: a for c, a in codes.items() if a != fine}
    assert all("not under the transport's URL" in l["lastError"] for l in letters), letters
    assert [r.path for r in bed.webhook.requests] == [hook.path]


def test_a_custom_notification_the_api_accepts_fits_an_apns_payload(push_server, bed, push_pool):
    """Data within the endpoint's limit (4,096 bytes of keys and values) must reach an APNs
    device — or be refused by the endpoint; APNs itself refuses payloads over 4,096 bytes, and
    the payload wraps the data in {"aps": …, "data": …}."""
    pool, alice_id = push_pool, new_id()
    alice = Caller.of(push_server, pool, alice_id)
    phone, token = alice.new_device("APNS"), hex_apns_token()
    alice.sync_token(phone, token)
    alice.login(phone)
    data = {"text": "x" * 4092}  # 4 + 4,092 = 4,096 bytes: at the documented limit
    before = status(push_server)["transports"]["apns"]
    r = Caller.admin(push_server).call("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": alice_id, "Data": data})
    if r.status_code != 200:
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (400, LIMIT), r.text
        return
    assert r.json()["DeviceCount"] == 1
    after = wait_until(lambda: (lambda t: t if t["delivered"] + t["dead"] > before["delivered"] + before["dead"] else None)(
        status(push_server)["transports"]["apns"]), what="the notification to be delivered or dead")
    refused = [(x.status, x.reason) for x in bed.apns.rejected if x.token == token.lower()]
    assert after["delivered"] == before["delivered"] + 1 and after["dead"] == before["dead"], (after, refused)
    [got] = bed.apns.received
    assert got.payload["data"] == data


def test_notify_on_a_server_without_push_delivery_is_a_configuration_error(tmp_root):
    server = Server(os.path.join(tmp_root, "devices-no-push"), ["--fast", "--no-push"])
    try:
        pool, identity = new_id(), new_id()
        alice = Caller.of(server, pool, identity)
        phone = alice.new_device("APNS")
        alice.sync_token(phone, hex_apns_token())
        alice.login(phone)
        Caller.admin(server).refused("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": identity, "Data": {"a": "b"}},
                                     "InvalidConfigurationException", 400)
    finally:
        server.stop()


# -- who may see and change a device ----------------------------------------------------------
