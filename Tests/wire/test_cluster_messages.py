"""Device-message consumers on cluster nodes: a consumer's cursor is a position per shard in the
shards' logs (`c:<shard>=<sequence>[.<entries>],…`), kept in the cluster's KV bucket
`syncledger_consumers`, so it reads on one node, acknowledges on another and goes on at a third
when its node dies — every message once, none repeated after an acknowledgement. Change-feed
sequences (one node's own) are refused there, as are positions this cluster did not give."""

import json
import subprocess
import threading
import time

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, new_id
from cluster_env import running_bed
from cluster_load import shard_of

SHARDS = 4


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-messages", shards=SHARDS, lease_seconds=2) as bed:
        yield bed


def call(node, method, path, body=b"", query="", creds=(ADMIN_KEY, ADMIN_SECRET, None), timeout=30):
    """A signed request, again while it answers 503 saying nothing was written (a shard between
    owners: what a client may safely retry)."""
    deadline = time.monotonic() + timeout
    while True:
        r = node.raw(method, path, body, query=query, key=creds[0], secret=creds[1], token=creds[2])
        if r.status_code != 503 or "nothing was written" not in r.text or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def ok(node, method, path, body=b"", query="", creds=(ADMIN_KEY, ADMIN_SECRET, None)):
    r = call(node, method, path, body, query, creds)
    assert r.status_code == 200, (method, path, r.status_code, r.text[:500])
    return r.json()


class Sender:
    """An identity signed in through Cognito Identity on one node, with a device made on another."""

    def __init__(self, bed, pool):
        unsigned = Config(signature_version=UNSIGNED, retries={"max_attempts": 1, "mode": "standard"})
        anonymous = boto3.client("cognito-identity", endpoint_url=bed.nodes[1].url, region_name=REGION, config=unsigned)
        self.identity = anonymous.get_id(IdentityPoolId=pool)["IdentityId"]
        c = anonymous.get_credentials_for_identity(IdentityId=self.identity)["Credentials"]
        self.creds = (c["AccessKeyId"], c["SecretKey"], c["SessionToken"])
        self.shard = shard_of(pool, self.identity, SHARDS)
        self.code = ok(bed.nodes[2], "POST", "/devices/sync", {"Platform": "GCM", "OsVersion": "14", "AppVersion": "1", "Model": "x",
                                                               "Locale": "en"}, creds=self.creds)["DeviceCode"]

    def send(self, node, message_id, ttl=600, sent_at=None):
        body = {"DeviceCode": self.code, "MessageId": message_id, "TimeToLive": ttl, "Data": {"n": message_id}}
        if sent_at is not None:
            body["SentAt"] = sent_at
        return ok(node, "POST", "/messages", body, creds=self.creds)


@pytest.fixture(scope="module")
def senders(bed):
    admin = boto3.client("cognito-identity", endpoint_url=bed.nodes[0].url, region_name=REGION,
                         aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET,
                         config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    pool = admin.create_identity_pool(IdentityPoolName="Messages", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    found = []
    while len({s.shard for s in found}) < SHARDS or len(found) < 6:
        found.append(Sender(bed, pool))
        assert len(found) < 40, "identities did not cover every shard"
    return pool, found


def send_all(bed, senders, prefix, count):
    """`count` messages round-robin over the senders and the nodes; their ids in sending order."""
    ids = []
    for i in range(count):
        sender = senders[i % len(senders)]
        sender.send(bed.nodes[i % 3], f"{prefix}-{i}")
        ids.append((sender.identity, f"{prefix}-{i}"))
    bed.wait_converged()
    return ids


def read(node, name, limit=None):
    query = f"consumer={name}" + (f"&limit={limit}" if limit else "")
    page = ok(node, "GET", "/messages", query=query)
    assert page["Consumer"] == name and "Cursor" not in page and "LastSequence" not in page, page
    return page


def ack(node, name, position):
    return ok(node, "POST", "/messages/ack", {"Consumer": name, "Position": position})["Consumer"]


def new_consumer(bed):
    """A consumer with a fresh name that has settled everything sent so far (consumers read every
    pool): its name, and the consumer as that acknowledgement left it."""
    name = "c-" + new_id()[-12:]
    return name, ack(bed.nodes[0], name, read(bed.nodes[0], name, limit=1000)["LastPosition"])


def mine(page, pool, prefix):
    return [(m["IdentityId"], m["MessageId"]) for m in page["Messages"] if m["IdentityPoolId"] == pool and m["MessageId"].startswith(prefix)]


def test_a_consumer_reads_on_one_node_acknowledges_on_another_and_gets_each_message_once(bed, senders):
    pool, people = senders
    sent = send_all(bed, people, "once", 30)
    name = "c-" + new_id()[-12:]
    got, pages, total = [], 0, 0
    while True:
        page = read(bed.nodes[pages % 3], name, limit=7)
        assert len(page["Messages"]) <= 7
        got += mine(page, pool, "once")
        total += len(page["Messages"])
        for m in page["Messages"]:
            assert m["Position"].startswith("c:") and "," not in m["Position"], m
        if not page["Messages"]:
            break
        # Acknowledged on the next node: the read after it, on the one after, starts past the page.
        consumer = ack(bed.nodes[(pages + 1) % 3], name, page["LastPosition"])
        assert consumer["Position"] == page["LastPosition"], (consumer, page["LastPosition"])
        pages += 1
        assert pages < 20
    assert sorted(got) == sorted(sent), "every message once"
    # Per identity, in sending order.
    for person in people:
        assert [m for i, m in got if i == person.identity] == [m for i, m in sent if i == person.identity]
    listed = {c["Name"]: c for n in bed.nodes for c in ok(n, "GET", "/messages/consumers")["Consumers"]}
    assert listed[name]["Acknowledged"] == total and listed[name]["Expired"] == 0, (listed[name], total)
    assert "Cursor" not in listed[name]
    # Every node lists the same consumer.
    assert all(ok(n, "GET", "/messages/consumers")["Consumers"] == ok(bed.nodes[0], "GET", "/messages/consumers")["Consumers"]
               for n in bed.nodes)
    # So does `syncledger cluster status`, straight from JetStream, with how far behind it is.
    out = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls, "--json"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    report = json.loads(out.stdout)
    shown = {c["name"]: c for c in report["messageConsumers"]}[name]
    assert (shown["positions"], shown["acknowledged"], shown["expired"]) == (listed[name]["Position"], total, 0), shown
    # Behind: the shards' messages it has not wholly passed (a message read in part counts).
    positions = dict(p.split("=") for p in shown["positions"][2:].split(","))

    def passed(shard):
        at = positions.get(str(shard), "0")
        return int(at.split(".")[0]) - (1 if "." in at else 0)
    assert shown["behind"] == sum(s["lastSequence"] - passed(s["shard"]) for s in report["shards"])
    text = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls], capture_output=True, timeout=60)
    assert text.returncode == 0 and f"{name}  {total}  0  {shown['behind']}  ".encode() in text.stdout, text.stdout
    # A node's own data directory holds none of them, and its CLI says where they are.
    local = subprocess.run([BINARY, "messages", "consumers", "--data", bed.nodes[0].data_dir], capture_output=True, timeout=60)
    assert local.returncode == 0 and b"consumers live in the cluster" in local.stderr, local.stderr


def test_acknowledging_one_message_settles_its_shard_up_to_it_and_nothing_else(bed, senders):
    pool, people = senders
    name, start = new_consumer(bed)
    send_all(bed, people, "part", 12)
    page = read(bed.nodes[1], name, limit=1000)
    messages = [m for m in page["Messages"] if m["IdentityPoolId"] == pool]
    assert len(messages) == 12
    def shard(m):
        return int(m["Position"][2:].split("=")[0])
    # The first message whose shard came before it (five messages over four shards: one does).
    at = next(j for j in range(1, 5) if shard(messages[j]) in {shard(m) for m in messages[:j]})
    chosen = messages[at]
    settled = [m for m in messages[:at + 1] if shard(m) == shard(chosen)]
    before = ack(bed.nodes[2], name, chosen["Position"])
    assert before["Acknowledged"] - start["Acknowledged"] == len(settled) >= 2, (before, start, settled)
    again = [m for m in read(bed.nodes[0], name, limit=1000)["Messages"] if m["IdentityPoolId"] == pool]
    assert [m["MessageId"] for m in again] == [m["MessageId"] for m in messages if m not in settled]
    # Acknowledging an earlier message of the shard changes nothing; nor does the same one again.
    assert ack(bed.nodes[1], name, settled[0]["Position"]) == before
    assert ack(bed.nodes[1], name, chosen["Position"]) == before


def test_two_nodes_acknowledging_at_once_count_each_message_once(bed, senders):
    pool, people = senders
    name, start = new_consumer(bed)
    send_all(bed, people, "race", 24)
    page = read(bed.nodes[0], name, limit=1000)
    assert len(page["Messages"]) == 24
    positions = [m["Position"] for m in page["Messages"]] + [page["LastPosition"]]
    errors = []

    def acker(i):
        try:
            for position in positions[i::3]:
                r = call(bed.nodes[i], "POST", "/messages/ack", {"Consumer": name, "Position": position})
                # Kept moving by the others past every retry: said so, and safe to send again.
                while r.status_code == 503 and "kept being moved" in r.text:
                    r = call(bed.nodes[i], "POST", "/messages/ack", {"Consumer": name, "Position": position})
                assert r.status_code == 200, r.text
        except BaseException as e:  # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=acker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    final = ack(bed.nodes[1], name, page["LastPosition"])
    assert final["Acknowledged"] - start["Acknowledged"] == 24 and final["Expired"] == start["Expired"], (final, start)
    assert read(bed.nodes[2], name)["Messages"] == []


def test_an_expired_message_is_skipped_and_counted_as_expired(bed, senders):
    pool, people = senders
    name, start = new_consumer(bed)
    # Sent 0.5 s into a 2 s life: it expires moments after it is taken (1.5 s to spare for the
    # request on a loaded machine).
    people[0].send(bed.nodes[0], "short", ttl=2, sent_at=time.time() - 0.5)
    people[1].send(bed.nodes[1], "long")
    bed.wait_converged()
    deadline = time.monotonic() + 10
    while True:
        page = read(bed.nodes[2], name)
        if page["SkippedExpired"] == 1:
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.1)  # waiting for the message's time to live to run out, on the server's clock
    assert [m["MessageId"] for m in page["Messages"]] == ["long"]
    consumer = ack(bed.nodes[0], name, page["LastPosition"])
    assert (consumer["Acknowledged"] - start["Acknowledged"], consumer["Expired"] - start["Expired"]) == (1, 1), (consumer, start)


def test_bad_acknowledgements_are_refused_and_change_nothing(bed, senders):
    pool, people = senders
    name, start = new_consumer(bed)
    cases = [
        ({"Consumer": name, "Sequence": 5}, "not a Sequence"),
        ({"Consumer": name, "Position": 5}, "Position"),
        ({"Consumer": name, "Position": "5"}, "start with c:"),
        ({"Consumer": name, "Position": "c:"}, "is not <shard>=<sequence>"),
        ({"Consumer": name, "Position": f"c:{SHARDS}=1"}, f"shard below {SHARDS}"),
        ({"Consumer": name, "Position": "c:0=1,0=2"}, "named twice"),
        ({"Consumer": name, "Position": "c:0=-1"}, "not a whole number"),
        ({"Consumer": name, "Position": "c:0=1.0"}, "from 1"),
        ({"Consumer": name, "Position": "c:0=" + "9" * 30}, "not a whole number"),
        ({"Consumer": name, "Position": "c:" + ",".join(f"{s}=1" for s in range(SHARDS)) + "," + "1" * 500}, "too long"),
        ({"Consumer": "bad name!", "Position": "c:0=1"}, "consumer name"),
    ]
    for body, said in cases:
        r = call(bed.nodes[1], "POST", "/messages/ack", body)
        assert r.status_code == 400 and said in r.json()["message"], (body, r.status_code, r.text[:300])
    # A position past the end of a shard's log: refused after a bounded wait, and the consumer
    # is as it was.
    began = time.monotonic()
    r = call(bed.nodes[2], "POST", "/messages/ack", {"Consumer": name, "Position": "c:1=999999999"})
    assert r.status_code == 400 and "past the end of its log" in r.json()["message"], r.text
    assert time.monotonic() - began < 10
    listed = {c["Name"]: c for c in ok(bed.nodes[2], "GET", "/messages/consumers")["Consumers"]}
    assert listed[name]["Position"] == start["Position"] and listed[name]["Acknowledged"] == start["Acknowledged"]
    # An identity may not read or acknowledge.
    creds = people[0].creds
    for method, path, body, query in [("GET", "/messages", b"", f"consumer={name}"), ("POST", "/messages/ack", {"Consumer": name, "Position": "c:0=1"}, ""),
                                      ("GET", "/messages/consumers", b"", "")]:
        r = call(bed.nodes[0], method, path, body, query=query, creds=creds)
        assert r.status_code == 403, (path, r.status_code, r.text[:200])


def test_a_shard_without_new_messages_does_not_hold_a_consumer_back(bed, senders):
    """One message on a shard, then many more than a page examines (ten times its limit) on
    another: a consumer reading one at a time still gets every one — the quiet shard's settled
    message is not where each page starts again."""
    pool, people = senders
    quiet = people[0]
    busy = next(p for p in people if p.shard != quiet.shard)
    name, _ = new_consumer(bed)
    sent = [(quiet.identity, "quiet-0")]
    quiet.send(bed.nodes[0], "quiet-0")
    for i in range(25):
        busy.send(bed.nodes[i % 3], f"quiet-busy-{i}")
        sent.append((busy.identity, f"quiet-busy-{i}"))
    bed.wait_converged()
    got = []
    for turn in range(60):
        page = read(bed.nodes[turn % 3], name, limit=1)
        got += mine(page, pool, "quiet")
        if page["LastPosition"] == page["Position"]:
            break
        ack(bed.nodes[(turn + 1) % 3], name, page["LastPosition"])
    assert got == sent


def test_a_consumer_name_with_dots_works_as_on_one_server(bed, senders):
    pool, people = senders
    for name in [".lead", "trail.", "a..b", "."]:
        page = read(bed.nodes[1], name, limit=1)
        consumer = ack(bed.nodes[2], name, page["LastPosition"])
        assert consumer["Name"] == name and consumer["Position"] == page["LastPosition"], consumer
        assert read(bed.nodes[0], name, limit=1)["Position"] == page["LastPosition"]
    names = {c["Name"] for c in ok(bed.nodes[0], "GET", "/messages/consumers")["Consumers"]}
    assert {".lead", "trail.", "a..b", "."} <= names


def test_a_consumer_goes_on_at_another_node_when_its_node_dies(bed, senders):
    """Last in the module: it kills a node."""
    pool, people = senders
    name, _ = new_consumer(bed)
    sent = send_all(bed, people, "dies", 20)
    page = read(bed.nodes[2], name, limit=8)
    got = mine(page, pool, "dies")
    ack(bed.nodes[2], name, page["LastPosition"])
    bed.kill(2)
    bed.wait_owned()
    # More sent through the survivors while the consumer moves on.
    for i in range(6):
        people[i % len(people)].send(bed.nodes[i % 2], f"dies-late-{i}")
        sent.append((people[i % len(people)].identity, f"dies-late-{i}"))
    bed.wait_converged()
    turn = 0
    while True:
        page = read(bed.nodes[turn % 2], name, limit=5)
        got += mine(page, pool, "dies")
        if not page["Messages"]:
            break
        ack(bed.nodes[(turn + 1) % 2], name, page["LastPosition"])
        turn += 1
        assert turn < 30
    assert sorted(got) == sorted(sent)
    assert len(got) == len(set(got)), "none twice"
