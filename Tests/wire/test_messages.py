"""Device-to-server messages through the real server (docs/devices.md): post and acknowledge,
resends answered from the first acknowledgement (after a restart, and after a kill -9 between
the append and the answer), conflicting ids, time to live on arrival and while unconsumed,
consumers that crash and read again, durable cursors, who may post and read, bad input that
stores nothing; and UpdateRecords with an Idempotency-Key through boto3."""

import http.client
import os
import time
import uuid

import pytest

from conftest import Dataset, Server, expect_error, new_id, strip
from devices_env import MESSAGES_DATASET, Caller, Consumer, message_entries, start_with_env, stored_message
from push_env import wait_until

RNF = "ResourceNotFoundException"
BAD = "InvalidParameterException"
LIMIT = "LimitExceededException"
DENIED = "NotAuthorizedException"
CONFLICT = "IdempotencyConflictException"
EXPIRED = "MessageExpiredException"
REPLAYED = "x-syncledger-replayed"


class Sender:
    """An identity of a fresh pool with one device it created (and is logged in on), and a
    consumer that starts after a marker message of that device."""

    def __init__(self, server, platform="GCM"):
        self.server = server
        self.pool, self.identity = new_id(), new_id()
        self.caller = Caller.of(server, self.pool, self.identity)
        self.device = self.caller.new_device(platform)
        self.caller.login(self.device)
        self.marker = self.caller.send(self.device, "marker-" + uuid.uuid4().hex, {"marker": "1"})
        self.consumer = Consumer(server)
        self.start = self.consumer.start_after(self.marker)

    def entries(self):
        """This identity's message entries after the marker, from the log."""
        return message_entries(self.server, self.pool, self.identity, after=self.marker)


def ids(page):
    return [m["MessageId"] for m in page["Messages"]]


# -- post, read, acknowledge ------------------------------------------------------------------

def test_messages_are_posted_read_in_order_and_acknowledged(server):
    s = Sender(server)
    sent_at = round(time.time() - 5, 3)
    first = s.caller.send(s.device, "m-1", {"event": "purchase", "sku": "A-1"}, ttl=600, sent_at=sent_at)
    second = s.caller.send(s.device, "m-2", {"event": "open"}, ttl=60)
    # A device clock ahead of the server's gains nothing: the TTL counts from arrival then.
    third = s.caller.send(s.device, "m-3", {"event": "close"}, ttl=60, sent_at=time.time() + 3600)
    assert s.marker < first < second < third

    page = s.consumer.read()
    assert page["Cursor"] == s.marker and ids(page) == ["m-1", "m-2", "m-3"], page
    m1, m2, m3 = page["Messages"]
    assert [m["Sequence"] for m in (m1, m2, m3)] == [first, second, third]
    assert {k: m1[k] for k in ("IdentityPoolId", "IdentityId", "DeviceCode", "TimeToLive", "Data")} == {
        "IdentityPoolId": s.pool, "IdentityId": s.identity, "DeviceCode": s.device, "TimeToLive": 600,
        "Data": {"event": "purchase", "sku": "A-1"}}
    assert m1["SentAt"] == pytest.approx(sent_at, abs=0.001)
    assert m1["ExpiresAt"] == pytest.approx(sent_at + 600, abs=0.002)  # from when it was sent
    assert m2.get("SentAt") is None and m2["ExpiresAt"] == pytest.approx(m2["ReceivedAt"] + 60, abs=0.002)
    assert m3["ExpiresAt"] == pytest.approx(m3["ReceivedAt"] + 60, abs=0.002)
    assert abs(m2["ReceivedAt"] - time.time()) < 60
    assert page["LastSequence"] == third and page["SkippedExpired"] == 0

    # Acknowledging the first two moves the cursor; the third comes again.
    acked = s.consumer.ack(second)
    assert acked["Cursor"] == second
    assert acked["Acknowledged"] - s.start["Acknowledged"] == 2 and acked["Expired"] == s.start["Expired"]
    assert ids(s.consumer.read()) == ["m-3"]
    # An acknowledgement at or below the cursor changes nothing; one past the feed is refused.
    assert s.consumer.ack(first) == acked
    Caller.admin(server).refused("POST", "/messages/ack", {"Consumer": s.consumer.name, "Sequence": third + 10_000_000}, BAD, 400)
    page = s.consumer.read()
    assert ids(page) == ["m-3"] and page["Cursor"] == second
    done = s.consumer.ack(page["LastSequence"])
    assert done["Cursor"] == third and done["Acknowledged"] - s.start["Acknowledged"] == 3
    assert s.consumer.read()["Messages"] == []
    listed = s.consumer.listed()
    assert (listed["Cursor"], listed["Acknowledged"], listed["Expired"]) == (third, done["Acknowledged"], done["Expired"])

    # Each message is one entry of the identity's message stream, by its device.
    entries = s.entries()
    assert [e["sequence"] for e in entries] == [first, second, third]
    assert [stored_message(e)["MessageId"] for e in entries] == ["m-1", "m-2", "m-3"]
    assert all(e["device"] == s.device and e["author"] == s.identity for e in entries)
    # The stream is SyncLedger's own: not a dataset Cognito shows or lets anyone touch.
    cognito = s.caller.boto()
    listed = cognito.list_datasets(IdentityPoolId=s.pool, IdentityId=s.identity)["Datasets"]
    assert MESSAGES_DATASET not in [d["DatasetName"] for d in listed]
    expect_error(cognito.list_records, BAD, 400, IdentityPoolId=s.pool, IdentityId=s.identity, DatasetName=MESSAGES_DATASET)
    expect_error(cognito.delete_dataset, BAD, 400, IdentityPoolId=s.pool, IdentityId=s.identity, DatasetName=MESSAGES_DATASET)


def test_a_resend_gets_the_first_acknowledgement_and_appends_nothing(server):
    s = Sender(server)
    data = {"event": "level-up", "level": "7"}
    sent = round(time.time(), 3)
    first = s.caller.post(s.device, "once", data, ttl=3600, sent_at=sent)
    assert first.status_code == 200 and REPLAYED not in first.headers
    for _ in range(3):
        again = s.caller.post(s.device, "once", data, ttl=3600, sent_at=sent)
        assert again.status_code == 200, again.text
        assert again.json() == first.json() and again.headers.get(REPLAYED) == "true"
    # The same id from another device of the same identity is another message.
    other = s.caller.new_device("APNS")
    other_sequence = s.caller.send(other, "once", data, ttl=3600, sent_at=sent)
    assert other_sequence > first.json()["Sequence"]
    assert [(m["MessageId"], m["DeviceCode"]) for m in s.consumer.read()["Messages"]] == [("once", s.device), ("once", other)]
    assert [e["sequence"] for e in s.entries()] == [first.json()["Sequence"], other_sequence]


def test_a_used_id_with_another_body_is_a_conflict_and_the_first_stays(server):
    s = Sender(server)
    sent = round(time.time(), 3)
    sequence = s.caller.send(s.device, "m", {"a": "1"}, ttl=600, sent_at=sent)
    for data, ttl, sent_at in (({"a": "2"}, 600, sent), ({"a": "1", "b": "2"}, 600, sent), ({}, 600, sent),
                               ({"a": "1"}, 601, sent), ({"a": "1"}, 600, sent + 1), ({"a": "1"}, 600, None)):
        r = s.caller.post(s.device, "m", data, ttl=ttl, sent_at=sent_at)
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (409, CONFLICT), (data, ttl, sent_at, r.text)
    [entry] = s.entries()
    assert entry["sequence"] == sequence and stored_message(entry)["Data"] == {"a": "1"}
    [message] = s.consumer.read()["Messages"]
    assert (message["MessageId"], message["Data"]) == ("m", {"a": "1"})
    # And the original resend is still answered.
    again = s.caller.post(s.device, "m", {"a": "1"}, ttl=600, sent_at=sent)
    assert again.json()["Sequence"] == sequence and again.headers.get(REPLAYED) == "true"


def test_a_message_expired_on_arrival_is_refused_and_nothing_is_stored(server):
    s = Sender(server)
    now = time.time()
    for ttl, sent_at in ((5, now - 60), (0, now - 1), (3600, now - 3601)):
        r = s.caller.post(s.device, "late", {"a": "1"}, ttl=ttl, sent_at=sent_at)
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (400, EXPIRED), (ttl, sent_at, r.text)
        assert "nothing was stored" in r.json()["message"]
    assert s.entries() == [] and s.consumer.read()["Messages"] == []
    # No key was kept for it: the same id sent again in time is a new message.
    sequence = s.caller.send(s.device, "late", {"a": "1"}, ttl=60, sent_at=time.time())
    assert [e["sequence"] for e in s.entries()] == [sequence]


def test_messages_not_consumed_within_their_time_to_live_expire_and_are_counted(server):
    s = Sender(server)
    sent = round(time.time(), 3)
    short = s.caller.send(s.device, "short", {"a": "1"}, ttl=1, sent_at=sent)
    long = s.caller.send(s.device, "long", {"a": "2"}, ttl=600)
    page = s.consumer.read()
    assert ids(page) in (["short", "long"], ["long"]), page  # (the short one may already be gone)
    expires = {m["MessageId"]: m["ExpiresAt"] for m in page["Messages"]}
    if "short" in expires:
        assert expires["short"] == pytest.approx(sent + 1, abs=0.002)
    # Wait until the server no longer hands it out: it expired unconsumed.
    page = wait_until(lambda: (lambda p: p if ids(p) == ["long"] and p["SkippedExpired"] == 1 else None)(s.consumer.read()),
                      timeout=5, what="the one-second message to expire")
    assert page["LastSequence"] == long and page["Messages"][0]["Sequence"] == long
    consumer = s.consumer.ack(page["LastSequence"])
    assert (consumer["Expired"] - s.start["Expired"], consumer["Acknowledged"] - s.start["Acknowledged"]) == (1, 1)
    assert consumer["Cursor"] == long
    # The entry stays in the log (it was taken); only consumers skip it.
    assert [e["sequence"] for e in s.entries()] == [short, long]


def test_a_consumer_that_crashes_before_acknowledging_gets_the_same_messages_again(server):
    s = Sender(server)
    sequences = [s.caller.send(s.device, f"m{i}", {"i": str(i)}) for i in range(3)]
    first_read = s.consumer.read()
    assert [m["Sequence"] for m in first_read["Messages"]] == sequences
    # "Crash": nothing acknowledged. The next read (a restarted consumer) gets the same.
    second_read = s.consumer.read()
    assert second_read["Messages"] == first_read["Messages"] and second_read["Cursor"] == s.marker
    # A page of one, acknowledged, then the rest.
    one = s.consumer.read(limit=1)
    assert ids(one) == ["m0"] and one["LastSequence"] == sequences[0]
    s.consumer.ack(one["LastSequence"])
    assert ids(s.consumer.read()) == ["m1", "m2"]
    # Another consumer has its own cursor: it reads from where it starts.
    other = Consumer(server)
    other.start_after(s.marker)
    assert ids(other.read()) == ["m0", "m1", "m2"]
    Caller.admin(server).refused("GET", "/messages", b"", BAD, 400, query="limit=10")  # no consumer named
    Caller.admin(server).refused("GET", "/messages", b"", BAD, 400, query=f"consumer={other.name}&limit=0")
    Caller.admin(server).refused("GET", "/messages", b"", BAD, 400, query="consumer=has%20space")
    Caller.admin(server).refused("POST", "/messages/ack", {"Consumer": other.name, "Sequence": -1}, BAD, 400)
    Caller.admin(server).refused("POST", "/messages/ack", {"Consumer": other.name, "Sequence": "7"}, BAD, 400)
    Caller.admin(server).refused("POST", "/messages/ack", {"Consumer": "x" * 65, "Sequence": 1}, BAD, 400)


# -- durability ---------------------------------------------------------------------------------

def test_cursors_and_message_ids_survive_a_restart(tmp_root):
    data = os.path.join(tmp_root, "messages-restart")
    server = Server(data, [])  # durable
    try:
        s = Sender(server)
        sequences = [s.caller.send(s.device, f"m{i}", {"i": str(i)}) for i in range(3)]
        acked = s.consumer.ack(sequences[1])
        # An UpdateRecords with an idempotency key, to retry after the restart.
        client = s.caller.boto()
        with idempotency_key(client, "restart-key"):
            first_update = strip(Dataset(client, s.pool, s.identity).put("d", {"k": "v"}))
        server.stop()
        assert server.exit_code == 0

        server = Server(data, [])
        caller, consumer = s.caller.on(server), Consumer(server, s.consumer.name)
        assert ids(consumer.read()) == ["m2"]
        listed = consumer.listed()
        assert (listed["Cursor"], listed["Acknowledged"], listed["Expired"]) == (sequences[1], acked["Acknowledged"], acked["Expired"])
        again = caller.post(s.device, "m0", {"i": "0"})
        assert again.json() == {"MessageId": "m0", "Sequence": sequences[0]} and again.headers.get(REPLAYED) == "true"
        client = caller.boto()
        sync = Dataset(client, s.pool, s.identity)
        with idempotency_key(client, "restart-key") as seen:
            retried = sync.update("d", [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])
        assert strip(retried) == first_update and seen["replayed"] == "true"
        assert sync.list("d")["DatasetSyncCount"] == 1
        assert [e["sequence"] for e in message_entries(server, s.pool, s.identity, after=s.marker)] == sequences
    finally:
        server.stop()


def test_kill_9_between_the_append_and_the_answer_then_the_resend_is_answered_from_the_stored_ack(tmp_root):
    data = os.path.join(tmp_root, "messages-kill")
    server = start_with_env(data, [], SYNCLEDGER_FAULT="exit-after-message-commit")  # durable
    try:
        pool, identity = new_id(), new_id()
        caller = Caller.of(server, pool, identity)
        device = caller.new_device("APNS")
        body = ({"order": "42", "total": "9.90"}, 3600, round(time.time(), 3))
        # The server takes the message, commits its entry, and dies before it answers.
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            caller.post(device, "pay-42", *body)
        assert server.process.wait(timeout=10) == -9
        server.stop()
        [entry] = message_entries(server, pool, identity)
        assert stored_message(entry)["MessageId"] == "pay-42"

        # Restarted without the fault, the device resends: the stored acknowledgement answers.
        server = Server(data, [])
        caller = caller.on(server)
        again = caller.post(device, "pay-42", *body)
        assert again.status_code == 200, again.text
        assert again.json() == {"MessageId": "pay-42", "Sequence": entry["sequence"]}
        assert again.headers.get(REPLAYED) == "true"
        assert [e["sequence"] for e in message_entries(server, pool, identity)] == [entry["sequence"]]
        mine = [m for m in Consumer(server).read()["Messages"] if m["IdentityId"] == identity]
        assert [(m["MessageId"], m["Sequence"], m["Data"]) for m in mine] == [("pay-42", entry["sequence"], body[0])]
        # A new message after the restart is taken as usual.
        assert caller.send(device, "pay-43", {"order": "43"}) > entry["sequence"]
    finally:
        server.stop()


# -- who may post and read ----------------------------------------------------------------------

def test_an_identity_posts_only_from_its_own_devices_and_never_reads_the_consumers(server):
    alice = Sender(server)
    bob = Caller.of(server, alice.pool, new_id())
    bobs = bob.new_device("GCM")
    bob.login(bobs)
    # From Bob's device, or an unknown one: the same 404.
    unknown = str(uuid.uuid4())
    said = {}
    for code in (bobs, unknown):
        r = alice.caller.post(code, "x", {"a": "1"})
        said[code] = r.json().get("message", "")
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (404, RNF), r.text
    assert said[bobs].replace(bobs, "CODE") == said[unknown].replace(unknown, "CODE")
    # An identity of another pool with Bob's code: not found either.
    outsider = Caller.of(server, new_id(), bob.identity)
    assert outsider.post(bobs, "x", {"a": "1"}).status_code == 404
    # Consumers are the server side's: identities may not read, acknowledge or list them.
    alice.caller.refused("GET", "/messages", b"", DENIED, 403, query=f"consumer={alice.consumer.name}")
    alice.caller.refused("POST", "/messages/ack", {"Consumer": alice.consumer.name, "Sequence": alice.marker}, DENIED, 403)
    alice.caller.refused("GET", "/messages/consumers", b"", DENIED, 403)
    # The admin does not post as a device.
    Caller.admin(server).refused("POST", "/messages", {"DeviceCode": alice.device, "MessageId": "a", "TimeToLive": 1,
                                                       "Data": {"a": "1"}}, DENIED, 403)
    # A device Alice is logged in on but does not own: she may post from it until she logs out.
    shared = bob.new_device("APNS")
    alice.caller.login(shared)
    alice.caller.send(shared, "from-shared", {"a": "1"})
    alice.caller.logout(shared)
    assert alice.caller.post(shared, "after-logout", {"a": "1"}).status_code == 404
    assert [stored_message(e)["MessageId"] for e in alice.entries()] == ["from-shared"]
    assert message_entries(server, alice.pool, bob.identity, after=alice.marker) == []


def test_bad_messages_get_typed_errors_and_store_nothing(server):
    s = Sender(server)
    base = {"DeviceCode": s.device, "MessageId": "bad", "TimeToLive": 60, "Data": {"a": "1"}}

    def variant(**changes):
        body = dict(base)
        for key, value in changes.items():
            if value is ...:
                body.pop(key)
            else:
                body[key] = value
        return body

    refusals = [
        (variant(Data={"k": "v" * 4096}), LIMIT),  # 4097 bytes of keys and values
        (variant(Data={f"k{i:03d}": "v" * 60 for i in range(65)}), LIMIT),  # 65 × 64 bytes
        (variant(Data={"": "v"}), BAD),
        (variant(Data={"k" * 257: "v"}), BAD),
        (variant(Data={"a": 1}), BAD),
        (variant(Data={"a": None}), BAD),
        (variant(Data={"a": {"b": "c"}}), BAD),
        (variant(Data=["a", "1"]), BAD),
        (variant(Data="a=1"), BAD),
        (variant(Data=...), BAD),
        (variant(TimeToLive="60"), BAD),
        (variant(TimeToLive=-1), BAD),
        (variant(TimeToLive=2_419_201), BAD),
        (variant(TimeToLive=1.5), BAD),
        (variant(TimeToLive=...), BAD),
        (variant(MessageId=""), BAD),
        (variant(MessageId="x" * 257), BAD),
        (variant(MessageId="line\nbreak"), BAD),
        (variant(MessageId=42), BAD),
        (variant(MessageId=...), BAD),
        (variant(SentAt="yesterday"), BAD),
        (variant(SentAt=1e300), BAD),
        (variant(DeviceCode=...), BAD),
        (variant(DeviceCode="not a code"), BAD),
        (variant(DeviceCode=7), BAD),
        (b"{\"DeviceCode\": ", BAD),
        (b"\"a string\"", BAD),
        ('{"DeviceCode": "%s", "MessageId": "bad", "TimeToLive": 60, "Data": {"a": "1", "a": "2"}}' % s.device, BAD),
    ]
    for body, code in refusals:
        r = s.caller.call("POST", "/messages", body)
        assert (r.status_code, r.headers.get("x-amzn-ErrorType")) == (400, code), (str(body)[:120], r.status_code, r.text[:300])
        assert r.json()["message"]
    assert s.entries() == [] and s.consumer.read()["Messages"] == []
    # The limits are inclusive, and the refused id was never taken.
    exactly = {"k": "v" * 4095}
    sequence = s.caller.send(s.device, "bad", exactly, ttl=2_419_200)
    assert s.caller.send(s.device, "x" * 256, {"k" * 256: ""}, ttl=0) > sequence
    assert [stored_message(e)["Data"] for e in s.entries()] == [exactly, {"k" * 256: ""}]


# -- idempotent UpdateRecords -------------------------------------------------------------------

class idempotency_key:
    """Adds `Idempotency-Key: KEY` to the client's UpdateRecords calls before they are signed;
    yields a dict that receives the `x-syncledger-replayed` header of the last answer."""

    def __init__(self, client, key):
        self.client, self.key, self.seen = client, key, {}

    def _add(self, request, **_):
        request.headers["Idempotency-Key"] = self.key

    def _answer(self, http_response, **_):
        self.seen["replayed"] = http_response.headers.get(REPLAYED)

    def __enter__(self):
        events = self.client.meta.events
        events.register("before-sign.cognito-sync.UpdateRecords", self._add)
        events.register("after-call.cognito-sync.UpdateRecords", self._answer)
        return self.seen

    def __exit__(self, *exc):
        events = self.client.meta.events
        events.unregister("before-sign.cognito-sync.UpdateRecords", self._add)
        events.unregister("after-call.cognito-sync.UpdateRecords", self._answer)


def test_update_records_with_an_idempotency_key_is_applied_once(server):
    pool, identity = new_id(), new_id()
    client = Caller.of(server, pool, identity).boto()
    sync = Dataset(client, pool, identity)
    patches = [{"Op": "replace", "Key": "score", "Value": "10", "SyncCount": 0},
               {"Op": "replace", "Key": "level", "Value": "2", "SyncCount": 0}]
    token = sync.token("game")
    key = "upd-" + uuid.uuid4().hex
    with idempotency_key(client, key) as seen:
        first = strip(sync.update("game", patches, token=token))
        assert seen["replayed"] is None
        assert [r["SyncCount"] for r in first["Records"]] == [1, 1]
        described = sync.describe("game")
        # The answer was lost; the client retries, with the old session token or a new one.
        for retry_token in (token, sync.token("game")):
            again = strip(sync.update("game", patches, token=retry_token))
            assert again == first and seen["replayed"] == "true"
        assert sync.list("game")["DatasetSyncCount"] == 1 and sync.describe("game") == described
        # The same key with another body is refused, and changes nothing.
        other = [dict(patches[0], Value="11")]
        expect_error(sync.update, CONFLICT, 409, "game", other, token=sync.token("game"))
        expect_error(sync.update, CONFLICT, 409, "game", patches[:1], token=sync.token("game"))
        assert sync.records("game") == {"score": ("10", 1), "level": ("2", 1)}
    # The same key on another dataset is another request.
    with idempotency_key(client, key) as seen:
        assert [r["SyncCount"] for r in sync.update("other", patches)["Records"]] == [1, 1]
        assert seen["replayed"] is None
    # Without a key, a retry of the same patches is the conflict Cognito answers.
    expect_error(sync.update, "ResourceConflictException", 409, "game", patches)
    # A key that is not 1-256 printable ASCII bytes is refused before anything is written.
    for bad in ("k" * 257, "tab\there"):
        with idempotency_key(client, bad):
            expect_error(sync.update, BAD, 400, "fresh", patches)
    assert sync.list("fresh")["DatasetExists"] is False
