"""The device registry's rules through the real server (docs/devices.md): who may see and
change a device, what the admin may do, every change an entry of the pool's system streams,
typed refusals of bad input that change nothing, the per-identity limit, removal, and Cognito's
RegisterDevice on the same registry."""

import uuid
from urllib.parse import urlencode

from conftest import expect_error, new_id
from devices_env import Caller, device_info, hex_apns_token, registry_entries

RNF = "ResourceNotFoundException"
BAD = "InvalidParameterException"
LIMIT = "LimitExceededException"
DENIED = "NotAuthorizedException"


def test_an_identity_cannot_see_change_log_out_or_list_another_identitys_devices(server):
    pool, alice_id, bob_id = new_id(), new_id(), new_id()
    alice, bob = Caller.of(server, pool, alice_id), Caller.of(server, pool, bob_id)
    bobs = bob.new_device("GCM", Settings={"ringtone": "bells"})
    bob.sync_token(bobs, "fcm-" + uuid.uuid4().hex)
    bob.login(bobs)
    mine = alice.new_device("APNS")
    alice.login(mine)
    before = bob.describe(bobs)
    marker = bob.send(bobs, "marker-" + uuid.uuid4().hex, {"m": "1"})  # a feed position to compare from

    unknown = str(uuid.uuid4())
    said = {}
    for code in (bobs, unknown):
        said[code] = [
            alice.refused("GET", "/devices/" + code, b"", RNF, 404),
            alice.refused("POST", "/devices/sync", {"DeviceCode": code, "AppVersion": "6.6.6", "Settings": {}}, RNF, 404),
            alice.refused("POST", "/devices/sync-token", {"DeviceCode": code, "Token": "fcm-alice"}, RNF, 404),
            alice.refused("POST", "/devices/sync-token", {"DeviceCode": code, "Token": None}, RNF, 404),
            alice.refused("POST", "/devices/logout", {"DeviceCode": code}, RNF, 404),
        ]
    # A foreign code gets the very answer an unknown one does: codes cannot be probed.
    assert [m.replace(bobs, "CODE") for m in said[bobs]] == [m.replace(unknown, "CODE") for m in said[unknown]]
    # Listing: only her own; naming Bob is refused.
    assert set(alice.devices()) == {mine}
    alice.refused("GET", "/devices", b"", DENIED, 403, query=urlencode({"IdentityId": bob_id}))
    alice.refused("GET", "/devices", b"", DENIED, 403, query=urlencode({"IdentityPoolId": pool, "IdentityId": bob_id}))
    # Naming another pool in the body is refused; an identity of another pool does not find it.
    alice.refused("POST", "/devices/sync", {"IdentityPoolId": new_id(), "DeviceCode": mine, "AppVersion": "1"}, DENIED, 403)
    outsider = Caller.of(server, new_id(), bob_id)
    outsider.refused("GET", "/devices/" + bobs, b"", RNF, 404)
    outsider.refused("POST", "/devices/logout", {"DeviceCode": bobs}, RNF, 404)
    # Admin-only operations.
    alice.refused("POST", "/devices/notify", {"IdentityPoolId": pool, "IdentityId": bob_id, "Data": {"a": "b"}}, DENIED, 403)

    # Bob's device is exactly as it was, and nothing was written to the pool's registry.
    assert bob.describe(bobs) == before
    assert set(bob.devices()) == {bobs}
    assert registry_entries(server, pool, after=marker) == []


def test_the_admin_updates_lists_and_logs_out_but_neither_creates_nor_logs_in(server):
    pool, alice_id = new_id(), new_id()
    alice, admin = Caller.of(server, pool, alice_id), Caller.admin(server)
    phone = alice.new_device("APNS")
    alice.login(phone)
    admin.refused("POST", "/devices/sync", device_info("APNS", IdentityPoolId=pool), BAD, 400)
    admin.refused("POST", "/devices/sync", {"DeviceCode": phone, "AppVersion": "9"}, BAD, 400)  # which pool?
    assert admin.sync(DeviceCode=phone, IdentityPoolId=pool, AppVersion="9.0.1") == phone
    assert alice.describe(phone)["AppVersion"] == "9.0.1"
    assert admin.describe(phone, query=urlencode({"IdentityPoolId": pool}))["IdentityId"] == alice_id
    assert set(admin.devices(urlencode({"IdentityPoolId": pool, "IdentityId": alice_id}))) == {phone}
    admin.refused("GET", "/devices", b"", BAD, 400)
    admin.refused("POST", "/devices/login", {"DeviceCode": phone}, DENIED, 403)
    out = admin.logout(phone, IdentityPoolId=pool)
    # Logged out, it is still Alice's own (she created it): she sees it, not logged in.
    assert out["LoggedIn"] is False and set(alice.devices()) == {phone}
    assert alice.devices()[phone]["LoggedIn"] is False
    assert set(admin.devices(urlencode({"IdentityPoolId": pool, "IdentityId": alice_id}))) == {phone}


def test_every_registry_change_is_an_entry_of_the_pools_devices_or_subscriptions_stream(server):
    pool, alice_id, bob_id = new_id(), new_id(), new_id()
    alice, bob = Caller.of(server, pool, alice_id), Caller.of(server, pool, bob_id)
    marker = alice.send(alice.new_device("GCM"), "marker", {"m": "1"})
    phone, token = alice.new_device("APNS"), hex_apns_token()
    alice.sync_token(phone, token)
    alice.login(phone)
    alice.boto().subscribe_to_dataset(IdentityPoolId=pool, IdentityId=alice_id, DatasetName="notes", DeviceId=phone)
    bob.login(phone)  # Alice is logged out of it first: her link and subscription go
    bob.logout(phone)
    alice.sync(DeviceCode=phone, Platform="APNS_SANDBOX")  # a platform change drops the token

    changes = [(e["author"], e["stream"]["dataset"], sorted((ev["op"], ev["key"]) for ev in e["events"] if not ev["key"].startswith("device/")))
               for e in registry_entries(server, pool, after=marker)]
    assert changes == [
        (alice_id, "devices", [("put", f"owned/{alice_id}/{phone}")]),
        (alice_id, "devices", [("put", f"tokens/APNS/{token.lower()}")]),
        (alice_id, "devices", [("put", f"linked/{alice_id}/{phone}")]),
        (alice_id, "subscriptions", [("put", f"{alice_id}/notes/{phone}")]),
        (bob_id, "devices", [("put", f"linked/{bob_id}/{phone}"), ("remove", f"linked/{alice_id}/{phone}")]),
        (bob_id, "subscriptions", [("remove", f"{alice_id}/notes/{phone}")]),
        (bob_id, "devices", [("remove", f"linked/{bob_id}/{phone}")]),
        (alice_id, "devices", [("remove", f"tokens/APNS/{token.lower()}")]),
    ], changes
    # Each devices entry also rewrote the device record; the token is in no device record.
    device_entries = [e for e in registry_entries(server, pool, after=marker) if e["stream"]["dataset"] == "devices"]
    assert all(any(ev["key"] == f"device/{phone}" for ev in e["events"]) for e in device_entries)
    now = alice.describe(phone)
    assert (now["Platform"], now["HasToken"], now["LoggedIn"]) == ("APNS_SANDBOX", False, False), now


def test_a_devices_creator_does_not_learn_who_logs_in_on_it(server):
    """Issue 22, item 5: the install identity that created a device must not learn the identity
    that logs in on it (a guest identity's id is enough to get its credentials): it sees the
    device redacted — no identity, settings or token state — and keeps logout and the power to
    take the token away, but may not point the token elsewhere."""
    pool, guest_id = new_id(), new_id()
    install, guest, admin = Caller.of(server, pool, new_id()), Caller.of(server, pool, guest_id), Caller.admin(server)
    phone, tablet = install.new_device("APNS", Settings={"theme": "dark"}), install.new_device("GCM")
    token = hex_apns_token()
    install.sync_token(phone, token)
    for code in (phone, tablet):
        guest.login(code)
    guest.sync(DeviceCode=phone, Settings={"home": "Bahnhofstrasse 1"})
    seen = []  # every answer the creator gets while the guest is logged in

    def as_creator(method, path, body=b""):
        r = install.call(method, path, body)
        seen.append(r.text)
        return r

    r = as_creator("GET", "/devices/" + phone)
    assert r.status_code == 200, r.text
    shown = r.json()["Device"]
    assert shown == {"DeviceCode": phone, "Platform": "APNS", "OsVersion": "17.4.1", "AppVersion": "3.2.0", "Model": "iPhone15,2",
                     "Locale": "de_CH", "LoggedIn": True, "Redacted": True, "CreationDate": shown["CreationDate"]}, shown
    # The creator may not point the token at a device of its own (the guest's notifications carry its id).
    r = as_creator("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": hex_apns_token()})
    assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (403, DENIED), r.text
    r = as_creator("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": token})  # not even the one it has
    assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (403, DENIED), r.text
    assert guest.describe(phone)["HasToken"] is True and admin.describe(phone, query=urlencode({"IdentityPoolId": pool}))["IdentityId"] == guest_id
    # Nor replace the settings it may not read, nor change the platform (that drops the guest's
    # token): 403, and nothing changed.
    for body in ({"DeviceCode": phone, "Settings": {"home": "elsewhere"}},
                 {"DeviceCode": phone, "Settings": {}},
                 {"DeviceCode": phone, "Platform": "GCM"},
                 {"DeviceCode": phone, "AppVersion": "9.9.9", "Settings": {"home": "elsewhere"}}):
        r = as_creator("POST", "/devices/sync", body)
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (403, DENIED), r.text
        assert "logged in" in r.json()["message"], r.text
    after = guest.describe(phone)
    assert (after["Settings"], after["Platform"], after["AppVersion"], after["HasToken"]) == ({"home": "Bahnhofstrasse 1"}, "APNS", "3.2.0", True), after
    # It keeps the info updates of its launches (the same platform too), taking the token away, and logout.
    assert as_creator("POST", "/devices/sync", {"DeviceCode": phone, "AppVersion": "3.3.0", "Platform": "APNS"}).status_code == 200
    assert as_creator("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": None}).status_code == 200
    assert (guest.describe(phone)["HasToken"], guest.describe(phone)["AppVersion"]) == (False, "3.3.0")
    r = as_creator("DELETE", "/devices/" + tablet)  # removed as it was: redacted too
    assert r.status_code == 200 and r.json()["Device"]["Redacted"] is True, r.text
    assert all(guest_id not in text and "Bahnhofstrasse" not in text for text in seen), seen
    r = install.call("POST", "/devices/logout", {"DeviceCode": phone})
    assert r.status_code == 200 and r.json()["Device"]["LoggedIn"] is False and guest_id not in r.text, r.text
    assert guest.devices() == {}
    # Logged out, the device is the creator's alone again and it sees it whole (its settings are
    # the device's: docs/devices.md says to keep a user's data in the user's datasets).
    assert install.describe(phone)["HasToken"] is False and "Redacted" not in install.describe(phone)


# -- bad input ------------------------------------------------------------------------------

def test_bad_device_input_gets_typed_errors_and_changes_nothing(server):
    pool = new_id()
    alice = Caller.of(server, pool, new_id())
    phone = alice.new_device("APNS", Settings={"theme": "dark"})
    alice.sync_token(phone, hex_apns_token())
    alice.login(phone)
    hook = alice.new_device("WEBHOOK")
    before = {code: alice.describe(code) for code in (phone, hook)}
    marker = alice.send(phone, "marker-" + uuid.uuid4().hex, {"m": "1"})

    unknown = str(uuid.uuid4())
    refusals = [
        # POST /devices/sync
        ("POST", "/devices/sync", {"DeviceCode": unknown, "AppVersion": "1"}, RNF, 404),
        ("POST", "/devices/sync", {"DeviceCode": "../" + phone, "AppVersion": "1"}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": "x" * 65, "AppVersion": "1"}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": 12345}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "OsVersion": "1" * 129}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Model": "m" * 129}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Locale": 7}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "AppVersion": ["3"]}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Platform": "BLACKBERRY"}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Platform": "apns"}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Platform": 1}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {f"k{i}": "v" for i in range(65)}}, LIMIT, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {"k": "v" * 1025}}, LIMIT, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {"k" * 129: "v"}}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {"": "v"}}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {"k": 1}}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": {"k": None}}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": [["k", "v"]]}, BAD, 400),
        ("POST", "/devices/sync", {"DeviceCode": phone, "Settings": "theme=light"}, BAD, 400),
        ("POST", "/devices/sync", '{"DeviceCode": "%s", "Settings": {"a": "1", "a": "2"}}' % phone, BAD, 400),
        ("POST", "/devices/sync", device_info(None), BAD, 400),  # a new device needs a platform
        ("POST", "/devices/sync", device_info("WINDOWS"), BAD, 400),
        ("POST", "/devices/sync", b"{not json", BAD, 400),
        ("POST", "/devices/sync", b"[]", BAD, 400),
        # POST /devices/sync-token
        ("POST", "/devices/sync-token", {"DeviceCode": unknown, "Token": "abc"}, RNF, 404),
        ("POST", "/devices/sync-token", {"Token": "abc"}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": 42}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": ""}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": "has space"}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": "line\nbreak"}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": "ä" * 10}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": "a" * 4097}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": hook, "Token": "not-a-url"}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": hook, "Token": "ftp://relay.example.com/x"}, BAD, 400),
        ("POST", "/devices/sync-token", {"DeviceCode": hook, "Token": "https://" + "a" * 2050 + ".example.com/"}, BAD, 400),
        # login / logout
        ("POST", "/devices/login", {"DeviceCode": unknown}, RNF, 404),
        ("POST", "/devices/login", {}, BAD, 400),
        ("POST", "/devices/login", {"DeviceCode": phone, "SubscribeAll": "yes"}, BAD, 400),
        ("POST", "/devices/logout", {"DeviceCode": unknown}, RNF, 404),
        ("POST", "/devices/logout", {"DeviceCode": None}, BAD, 400),
        # reads
        ("GET", "/devices/" + unknown, b"", RNF, 404),
        ("GET", "/devices/bad%20code", b"", BAD, 400),
    ]
    for method, path, body, code, status_code in refusals:
        response = alice.call(method, path, body)
        assert (response.status_code, response.headers.get("x-amzn-ErrorType")) == (status_code, code), \
            (method, path, str(body)[:120], response.status_code, response.text[:300])
        assert response.json()["message"], response.text

    # Nothing changed: the devices read the same, the registry got no entry, no device was made.
    assert {code: alice.describe(code) for code in (phone, hook)} == before
    assert set(alice.devices()) == {phone, hook}  # the logged-in one and the one she made
    # A launch that repeats what is stored, a login as it is, writes nothing either.
    assert alice.sync(DeviceCode=phone, OsVersion=before[phone]["OsVersion"], Settings=before[phone]["Settings"]) == phone
    alice.login(phone)
    assert registry_entries(server, pool, after=marker) == []
    assert alice.describe(phone) == before[phone]


def test_an_identity_creates_at_most_100_devices(server):
    pool = new_id()
    alice = Caller.of(server, pool, new_id())
    codes = {alice.new_device("GCM", Model=f"m{i}") for i in range(100)}
    assert len(codes) == 100
    marker = alice.send(next(iter(codes)), "marker", {"m": "1"})
    alice.refused("POST", "/devices/sync", device_info("GCM"), LIMIT, 400)
    assert registry_entries(server, pool, after=marker) == []
    # Updating one of them is no creation.
    code = sorted(codes)[0]
    assert alice.sync(DeviceCode=code, AppVersion="4.0") == code


# -- Cognito's RegisterDevice on the same registry -----------------------------------------------

def test_register_device_returns_a_device_code_of_the_registry(server):
    pool, alice_id = new_id(), new_id()
    alice = Caller.of(server, pool, alice_id)
    cognito = alice.boto()
    token = "fcm-" + uuid.uuid4().hex
    device_id = cognito.register_device(IdentityPoolId=pool, IdentityId=alice_id, Platform="GCM", Token=token)["DeviceId"]
    device = alice.describe(device_id)
    assert (device["DeviceCode"], device["Platform"], device["IdentityId"]) == (device_id, "GCM", alice_id)
    # Logged in, with its token, and — the Cognito way — only the datasets it subscribes to.
    assert (device["LoggedIn"], device["HasToken"], device["SubscribeAll"]) == (True, True, False), device
    assert set(alice.devices()) == {device_id}
    cognito.subscribe_to_dataset(IdentityPoolId=pool, IdentityId=alice_id, DatasetName="notes", DeviceId=device_id)
    # The same token again: the same device.
    assert cognito.register_device(IdentityPoolId=pool, IdentityId=alice_id, Platform="GCM", Token=token)["DeviceId"] == device_id
    # The other way round: a device of the registry is a Cognito device (its code is a DeviceId)…
    phone = alice.new_device("APNS")
    phone_token = hex_apns_token()
    alice.sync_token(phone, phone_token)
    alice.login(phone, subscribe_all=False)
    cognito.subscribe_to_dataset(IdentityPoolId=pool, IdentityId=alice_id, DatasetName="notes", DeviceId=phone)
    # …and RegisterDevice with its token (either case) finds it.
    assert cognito.register_device(IdentityPoolId=pool, IdentityId=alice_id, Platform="APNS", Token=phone_token.lower())["DeviceId"] == phone
    assert alice.describe(phone)["SubscribeAll"] is False
    assert set(alice.devices()) == {device_id, phone}
    # Another identity's device cannot be subscribed to Alice's datasets.
    bob = Caller.of(server, pool, new_id())
    bobs = bob.new_device("GCM")
    bob.login(bobs)
    expect_error(cognito.subscribe_to_dataset, RNF, 404, IdentityPoolId=pool, IdentityId=alice_id, DatasetName="notes",
                 DeviceId=bobs)


def test_a_removed_device_is_gone_from_the_registry_and_frees_its_place(server):
    pool, alice_id = new_id(), new_id()
    alice, bob = Caller.of(server, pool, alice_id), Caller.of(server, pool, new_id())
    phone = alice.new_device("APNS")
    alice.sync_token(phone, hex_apns_token())
    alice.login(phone)
    # Bob may not remove it, and learns nothing from trying.
    bob.refused("DELETE", "/devices/" + phone, b"", RNF, 404)
    assert alice.describe(phone)["LoggedIn"] is True
    reply = alice.call("DELETE", "/devices/" + phone)
    assert reply.status_code == 200 and reply.json()["Device"]["DeviceCode"] == phone, reply.text
    alice.refused("GET", "/devices/" + phone, b"", RNF, 404)
    alice.refused("POST", "/devices/sync-token", {"DeviceCode": phone, "Token": hex_apns_token()}, RNF, 404)
    alice.refused("DELETE", "/devices/" + phone, b"", RNF, 404)
    assert alice.devices() == {}
    # The removal is in the log: the record went.
    removed = [e for e in registry_entries(server, pool) if any(ev.get("key") == "device/" + phone and ev["op"] == "remove" for ev in e["events"])]
    assert len(removed) == 1 and removed[0]["author"] == alice_id
