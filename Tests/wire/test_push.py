"""Push sync end to end: the real server delivers to stand-ins that speak APNs (HTTP/2 over TLS,
ES256 provider tokens), FCM HTTP v1 (with its OAuth grant) and signed webhooks, and check every
header, token and body (Tests/wire/push/)."""

import json
import os
import signal
import time

import pytest

from conftest import Server, new_id
from push.webhook import verify_signature
from push_env import (ARN_ADM, ARN_APNS, ARN_GCM, ARN_SANDBOX, KEY_ID, TEAM_ID, TOPIC, WEBHOOK_SECRET, Identity,
                      PushBed, cli, counter, hex_token, status, wait_until)


@pytest.fixture(scope="module")
def bed(tmp_root):
    bed = PushBed(os.path.join(tmp_root, "push-bed"))
    yield bed
    bed.stop()


@pytest.fixture(scope="module")
def push_server(tmp_root, bed):
    server = Server(os.path.join(tmp_root, "push-data"), ["--fast", *bed.server_args()])
    bed.configure(server)
    yield server
    server.stop()


@pytest.fixture
def ident(push_server, bed):
    bed.reset()
    yield Identity(push_server.client(), new_id())
    bed.reset()


def for_token(token):
    return lambda r: r.token == token.lower()


def test_a_change_reaches_every_other_subscribed_device_on_each_transport(push_server, bed, ident):
    writer, writer_token = ident.device("APNS")
    phone, phone_token = ident.device("APNS")
    dev, dev_token = ident.device("APNS_SANDBOX")
    android, android_token = ident.device("GCM")
    kindle, kindle_token = ident.device("ADM")
    unsubscribed, unsubscribed_token = ident.device("APNS")
    ident.subscribe("settings", writer, phone, dev, android, kindle)
    queued_before = {t: counter(push_server, t, "queued") for t in ("apns", "fcm", "webhook")}

    count = ident.put("settings", {"theme": "dark"}, device_id=writer)

    # APNs: HTTP/2, a background push with the five string keys, every header Apple wants.
    [note] = bed.apns.wait_for(for_token(phone_token))
    assert note.http_version == "2"
    assert note.payload == {"aps": {"content-available": 1}, "data": ident.data("settings", count)}
    assert note.push_type == "background" and note.priority == "5" and note.topic == TOPIC
    assert note.collapse_id == "settings"
    assert int(note.headers["apns-expiration"]) > time.time() + 86_000  # the default time-to-live: 24 h
    [sandboxed] = bed.sandbox.wait_for(for_token(dev_token))
    assert sandboxed.payload["data"] == ident.data("settings", count)
    # FCM: a data-only message, all strings, NORMAL priority, a ttl and a collapse key, an apns block.
    [message] = bed.fcm.wait_for(lambda r: r.token == android_token)
    assert message.data == ident.data("settings", count)
    assert message.android["priority"] == "NORMAL" and message.android["collapse_key"] == "settings"
    assert message.android["ttl"].endswith("s") and int(message.android["ttl"][:-1]) > 86_000
    assert message.apns["headers"]["apns-push-type"] == "background"
    assert message.apns["payload"] == {"aps": {"content-available": 1}}
    # Webhook: the receiver verified the signature (it refuses anything else with 401).
    [hook] = bed.webhook.wait_for(lambda r: json.loads(r.body)["deviceId"] == kindle)
    body = json.loads(hook.body)
    assert {k: body[k] for k in ident.data("settings", count)} == ident.data("settings", count)
    assert body["platform"] == "ADM" and body["token"] == kindle_token
    assert verify_signature(WEBHOOK_SECRET, hook.headers["x-syncledger-timestamp"], hook.body,
                            hook.headers["x-syncledger-signature"])

    # Exactly one notification per other device: none for the writer, none unsubscribed.
    queued = {t: counter(push_server, t, "queued") - queued_before[t] for t in ("apns", "fcm", "webhook")}
    assert queued == {"apns": 2, "fcm": 1, "webhook": 1}, queued
    tokens = {r.token for r in bed.apns.received}
    assert writer_token.lower() not in tokens and unsubscribed_token.lower() not in tokens
    assert not bed.apns.invalid and not bed.fcm.invalid and not bed.webhook.invalid

    # One provider token per APNs service and one OAuth grant served every request.
    assert len(bed.apns.provider_tokens) == 1 and len(bed.sandbox.provider_tokens) == 1
    assert bed.fcm.grants_issued == 1

    # DeleteDataset notifies too (made by an admin, no device: every subscriber hears of it).
    bed.reset()
    deleted = ident.admin.delete_dataset(IdentityPoolId=ident.pool, IdentityId=ident.identity, DatasetName="settings")
    [gone] = bed.apns.wait_for(for_token(writer_token))
    assert int(gone.payload["data"]["syncCount"]) == count + 1
    assert deleted["Dataset"]["DatasetName"] == "settings"

    metrics = push_server.metrics()
    assert 'syncledger_push_total{transport="apns",outcome="delivered"}' in metrics
    assert 'syncledger_push_delivery_seconds_count{transport="fcm"}' in metrics


def test_pending_notifications_collapse_and_all_arrive_when_the_service_is_back(push_server, bed, ident):
    phone, token = ident.device("APNS")
    ident.subscribe("a", phone)
    ident.subscribe("b", phone)
    bed.apns.set_down(True)
    ident.put("a", {"k": "1"})
    bed.apns.wait_for_requests(lambda r: r.token == token.lower() and r.cause == "down")  # tried, refused
    ident.put("a", {"k": "2"})
    last = ident.put("a", {"k": "3"})
    ident.put("b", {"k": "1"})
    # One row per device and dataset, however many changes it stands for.
    pending = [json.loads(line) for line in cli(push_server, "push", "pending", "--json").stdout.splitlines()]
    mine = sorted(p["datasetName"] for p in pending if p["identityId"] == ident.identity)
    assert mine == ["a", "b"], pending
    bed.apns.set_down(False)
    got = bed.apns.wait_for(for_token(token), count=2)
    assert sorted((r.payload["data"]["datasetName"], r.payload["data"]["syncCount"]) for r in got) == [("a", str(last)), ("b", "1")]
    assert bed.apns.down_count >= 1
    wait_until(lambda: not [p for p in cli(push_server, "push", "pending", "--json").stdout.splitlines()
                            if ident.identity in p], what="the outbox to empty")


def test_time_to_live_drops_a_notification_unsent(push_server, bed, ident):
    phone, token = ident.device("GCM")
    ident.subscribe("d", phone)
    out = cli(push_server, "push", "ttl", "--identity-pool-id", ident.pool, "1")
    assert b"1 seconds" in out.stdout
    expired = counter(push_server, "fcm", "expired")
    bed.fcm.set_down(True)
    ident.put("d", {"k": "v"})
    wait_until(lambda: counter(push_server, "fcm", "expired") > expired, what="the notification to expire")
    bed.fcm.set_down(False)
    # A later change with a fresh time-to-live goes out; the expired one never does.
    cli(push_server, "push", "ttl", "--identity-pool-id", ident.pool, "--clear")
    count = ident.put("d", {"k": "w"})
    [got] = bed.fcm.wait_for(lambda r: r.token == token)
    assert got.data["syncCount"] == str(count) == "2"
    assert [r.data["syncCount"] for r in bed.fcm.received if r.token == token] == ["2"]


def test_a_dead_apns_token_is_disabled_and_a_fresh_registration_revives_it(push_server, bed, ident):
    phone, token = ident.device("APNS")
    ident.subscribe("d", phone)
    bed.apns.set_token_response(token.lower(), 410, "Unregistered", {"timestamp": int(time.time() * 1000) + 1000})
    disabled = counter(push_server, "apns", "token_disabled")
    ident.put("d", {"k": "1"})
    wait_until(lambda: counter(push_server, "apns", "token_disabled") > disabled, what="the token to be disabled")
    # The next change skips the dead token: nothing is sent to it.
    skipped = counter(push_server, "apns", "skipped")
    ident.put("d", {"k": "2"})
    wait_until(lambda: counter(push_server, "apns", "skipped") > skipped, what="the change to skip the dead token")
    assert len([r for r in bed.apns.requests if r.token == token.lower()]) == 1  # only the one that got 410
    # RegisterDevice with a fresh token (as iOS does after a reinstall) revives the same device
    # with its subscriptions.
    fresh = hex_token().upper()
    again, _ = ident.device("APNS", fresh)
    assert again == phone
    count = ident.put("d", {"k": "3"})
    [got] = bed.apns.wait_for(for_token(fresh))
    assert got.payload["data"]["syncCount"] == str(count)
    assert [r for r in bed.apns.received if r.token == token.lower()] == []


def test_bad_device_token_and_fcm_unregistered_disable_their_tokens(push_server, bed, ident):
    phone, token = ident.device("APNS")
    android, android_token = ident.device("GCM")
    ident.subscribe("d", phone, android)
    bed.apns.script(token.lower(), [(400, "BadDeviceToken")])
    bed.fcm.set_token_response(android_token, 404, "UNREGISTERED")
    apns_disabled, fcm_disabled = counter(push_server, "apns", "token_disabled"), counter(push_server, "fcm", "token_disabled")
    ident.put("d", {"k": "1"})
    wait_until(lambda: counter(push_server, "apns", "token_disabled") > apns_disabled
               and counter(push_server, "fcm", "token_disabled") > fcm_disabled, what="both tokens to be disabled")
    # A dead token is not a failure to deliver: nothing goes to the dead letters.
    assert cli(push_server, "push", "dead-letters", "--identity-pool-id", ident.pool, "--json").stdout.strip() == b""


def test_fcm_retries_honour_retry_after_and_a_refused_access_token_is_replaced(push_server, bed, ident):
    android, token = ident.device("GCM")
    ident.subscribe("d", android)
    bed.fcm.script(token, [(503, "UNAVAILABLE", {"retry_after": 1}), (500, "INTERNAL")])
    started = time.monotonic()
    count = ident.put("d", {"k": "1"})
    [got] = bed.fcm.wait_for(lambda r: r.token == token)
    assert got.data["syncCount"] == str(count)
    assert time.monotonic() - started >= 1.0  # waited for Retry-After, not just the 0.05 s backoff
    refused = [r for r in bed.fcm.requests if getattr(r, "token", None) == token and r.status >= 500]
    assert [r.status for r in refused] == [503, 500]
    # An access token FCM stops accepting (401) is replaced with a new grant and the send retried.
    grants = bed.fcm.grants_issued
    bed.fcm.expire_access_tokens()
    count = ident.put("d", {"k": "2"})
    [again] = bed.fcm.wait_for(lambda r: r.token == token and r.data["syncCount"] == str(count))
    assert bed.fcm.grants_issued == grants + 1


def test_apns_answers_that_must_not_be_retried_go_to_the_dead_letters(push_server, bed, ident):
    phone, token = ident.device("APNS")
    ident.subscribe("d", phone)
    bed.apns.script(token.lower(), [(403, "ExpiredProviderToken"), (400, "BadCollapseId")])
    ident.put("d", {"k": "1"})
    letters = wait_until(lambda: [json.loads(l) for l in cli(push_server, "push", "dead-letters", "--identity-pool-id",
                                                               ident.pool, "--json").stdout.splitlines()],
                         what="a dead letter")
    assert len(letters) == 1 and letters[0]["deviceId"] == phone
    assert "BadCollapseId" in letters[0]["lastError"], letters
    # ExpiredProviderToken made the sender sign a new provider token at once.
    tried = [r for r in bed.apns.requests if r.token == token.lower()]
    assert [r.reason for r in tried] == ["ExpiredProviderToken", "BadCollapseId"]
    assert tried[0].provider_token != tried[1].provider_token
    # `push retry` takes it back; this time APNs accepts it.
    out = cli(push_server, "push", "retry", "--identity-pool-id", ident.pool)
    assert b"Took 1 dead letter" in out.stdout
    [got] = bed.apns.wait_for(for_token(token))
    assert got.payload["data"]["syncCount"] == "1"


def test_a_platform_without_a_configured_transport_is_a_dead_letter_not_a_silent_drop(push_server, bed):
    admin = push_server.client()
    unconfigured = "arn:aws:sns:us-east-1:123456789012:app/GCM/NotConfigured"
    ident = Identity(admin, new_id(), arns=[ARN_APNS, unconfigured])
    android, token = ident.device("GCM")
    kindle, _ = ident.device("ADM")  # no ADM application in the pool at all
    ident.subscribe("d", android, kindle)
    ident.put("d", {"k": "1"})
    letters = wait_until(lambda: (lambda ls: ls if len(ls) == 2 else None)(
        [json.loads(l) for l in cli(push_server, "push", "dead-letters", "--identity-pool-id", ident.pool, "--json").stdout.splitlines()]),
        what="two dead letters")
    reasons = {l["platform"]: l["lastError"] for l in letters}
    assert "no push transport is configured for " + unconfigured in reasons["GCM"]
    assert "no application for platform ADM" in reasons["ADM"]
    # Configure it, retry: the notification goes out.
    cli(push_server, "push", "configure", "fcm", "--arn", unconfigured, "--service-account", bed.service_account[0])
    cli(push_server, "push", "retry", "--identity-pool-id", ident.pool, "--device-id", android)
    [got] = bed.fcm.wait_for(lambda r: r.token == token)
    assert got.data["syncCount"] == "1"
    cli(push_server, "push", "remove-transport", "--arn", unconfigured)


def test_transport_secrets_stay_with_the_secrets(push_server, bed):
    listed = cli(push_server, "push", "transports", "--json").stdout.decode()
    transports = {json.loads(line)["arn"]: json.loads(line) for line in listed.splitlines()}
    assert transports[ARN_APNS]["keyId"] == KEY_ID and transports[ARN_APNS]["teamId"] == TEAM_ID
    assert transports[ARN_ADM]["url"].startswith(bed.webhook.url)
    key_text = open(bed.apns_key.path).read()
    key_body = "".join(key_text.strip().splitlines()[1:-1])
    with open(bed.service_account[0]) as f:
        fcm_key = json.load(f)["private_key"]
    fcm_body = "".join(fcm_key.strip().splitlines()[1:-1])
    assert WEBHOOK_SECRET not in listed and key_body[:40] not in listed and fcm_body[:40] not in listed
    # Neither the ledger, the outbox nor the server's log holds a key or a secret.
    for folder, _, names in os.walk(push_server.data_dir):
        if os.path.basename(folder) == "secrets":
            continue
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            for secret in (WEBHOOK_SECRET, key_body[:40], fcm_body[:40]):
                assert secret.encode() not in data, os.path.join(folder, name)
    with open(push_server.log_path, "rb") as f:
        log = f.read()
    assert WEBHOOK_SECRET.encode() not in log and b"bearer ey" not in log.lower()


def test_configure_refuses_what_cannot_work(push_server, bed, tmp_path):
    def refused(*args):
        out = cli(push_server, "push", "configure", *args, check=False)
        assert out.returncode != 0, args
        return out.stderr.decode()

    assert "plain http only on loopback" in refused("webhook", "--arn", ARN_ADM, "--url", "http://example.com/hook",
                                                   "--secret-file", bed.secret_file)
    assert "user name or password" in refused("webhook", "--arn", ARN_ADM, "--url", "https://u:p@example.com/",
                                             "--secret-file", bed.secret_file)
    assert "cannot serve GCM devices" in refused("apns", "--arn", ARN_GCM, "--key-file", bed.apns_key.path,
                                                 "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
    assert "not an SNS platform application ARN" in refused("fcm", "--arn", "arn:aws:sns:us-east-1:1:topic/x",
                                                             "--service-account", bed.service_account[0])
    bad_key = tmp_path / "bad.p8"
    bad_key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert "not a P-256 .p8 key" in refused("apns", "--arn", ARN_APNS, "--key-file", str(bad_key),
                                            "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
    assert "no such file" in refused("fcm", "--arn", ARN_GCM, "--service-account", str(tmp_path / "missing.json"))
    # The working configuration is untouched by the refusals.
    transports = [json.loads(l) for l in cli(push_server, "push", "transports", "--json").stdout.splitlines()]
    assert {t["arn"]: t["kind"] for t in transports}[ARN_ADM] == "webhook"


def test_kill_9_with_undelivered_notifications_then_all_arrive_once(tmp_root, bed):
    """Acknowledged writes whose notifications could not be delivered survive kill -9: after a
    restart the new process sends every one, and none twice.

    Requests the killed process had already written to its socket can still reach the
    stand-in after the kill (the kernel holds them) and be accepted once it is up again: that
    is the at-least-once the docs promise, not a second send. Each process signs its own APNs
    provider token (ES256 signatures are randomized), so the new process's requests are told
    apart by theirs."""
    bed.reset()
    data = os.path.join(tmp_root, "push-kill")
    server = Server(data, bed.server_args())  # durable
    bed.configure(server)
    try:
        ident = Identity(server.client(), new_id())
        phone, token = ident.device("APNS")
        datasets = [f"ds{i}" for i in range(12)]
        for name in datasets:
            ident.subscribe(name, phone)
        bed.apns.set_down(True)
        counts = {name: ident.put(name, {"k": name}) for name in datasets}
        first = bed.apns.wait_for_requests(lambda r: r.token == token.lower(), count=1)
        killed_tokens = {r.headers.get("authorization") for r in first}
        assert None not in killed_tokens
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        server.stop()
        assert [r for r in bed.apns.received if r.token == token.lower()] == []
        bed.apns.set_down(False)
        server = Server(data, bed.server_args())

        def from_new_process(r):
            return r.token == token.lower() and r.headers.get("authorization") not in killed_tokens

        got = bed.apns.wait_for(from_new_process, count=len(datasets), timeout=20)
        delivered = sorted((r.payload["data"]["datasetName"], r.payload["data"]["syncCount"]) for r in got)
        assert delivered == sorted((name, str(c)) for name, c in counts.items()), open(server.log_path, errors="replace").read()[-6000:]
        wait_until(lambda: status(server)["transports"]["apns"]["pending"] == 0, what="the outbox to empty")
        assert len([r for r in bed.apns.received if from_new_process(r)]) == len(datasets)
    finally:
        server.stop()
        bed.reset()
