"""Valid requests for the HTTP fuzzer, and the server state they are built on (Context)."""

import base64
import json
import os
import random
import threading
import time
import uuid
from urllib.parse import quote

from conftest import ADMIN_KEY, ADMIN_SECRET

from .identity_requests import IdentityState
from .requests import IDENTITY_LEVEL, SEGMENT_OPERATIONS, Request, serialize
from .segments import MAGIC, SEGMENT_TYPE, ZEROS, EntrySpec, Header, render_segment, stream_key
from .surfaces import NEW_OPERATIONS, SurfaceState, pick_operation, valid_surface_request

PLATFORMS = ["APNS", "APNS_SANDBOX", "GCM", "ADM"]


def short_id(rng, region="us-east-1"):
    return f"{region}:{uuid.UUID(int=rng.getrandbits(128), version=4)}"


# --------------------------------------------------------------------------------------------
# The server's state the valid requests are built on

class Context:
    """What valid requests need: a pool and identities with data, credentials, session tokens,
    a device id, stream heads and real segments. Built deterministically from the seed."""

    def __init__(self, fuzzer, seed):
        rng = random.Random(f"{seed}:context")
        self.fuzzer = fuzzer
        self.seed = seed
        self.pool = short_id(rng)
        self.identity = short_id(rng)
        self.other_identity = short_id(rng)
        self.datasets = ["notes", "prefs", "games", "scratch"]
        self.lock = threading.Lock()
        self.tokens = {}   # dataset -> (token, monotonic time, {key: sync count}, dataset sync count)
        self.heads = {}    # dataset -> (offset, hash)
        self.real_segments = {}
        self.credentials = {"admin": (ADMIN_KEY, ADMIN_SECRET, None)}
        self.device_id = "unknown-device"
        self.next_tokens = {}   # operation -> a real NextToken
        self.variety = True     # valid requests vary: numbers at the edge of their range, other identities
        self.identity_state = IdentityState(self, rng)   # Cognito Identity's pools and identities
        self.surfaces = SurfaceState(self, rng)          # devices, messages, redactions, a payload token

    # -- helpers that talk to the server (their answers are checked like any other) --------

    def call(self, request, cred="admin"):
        return self.fuzzer.exchange(request, cred, helper=True)

    def setup(self, tmp=None):
        """Writes a little data, registers a device, mints credentials, fetches segments; then
        the other surfaces' state (identity pools, devices, messages, a payload token; `tmp`:
        a directory for the streams sink, by default beside the data directory)."""
        server = self.fuzzer.server
        for cred, identity, token in (("identity", self.identity, False), ("identity-token", self.identity, True),
                                      ("other", self.other_identity, False)):
            c = server.mint(self.pool, identity, session_token=token)
            self.credentials[cred] = (c["AccessKeyId"], c["SecretAccessKey"], c.get("SessionToken"))
        for identity in (self.identity, self.other_identity):
            for dataset in self.datasets[:3]:
                for round_ in range(2):
                    info = self.refresh_token(dataset, identity)
                    patches = [{"Op": "replace", "Key": f"k{i}", "Value": f"v{round_}-{i}", "SyncCount": info[2].get(f"k{i}", 0)}
                               for i in range(3)]
                    r = self.call(serialize("UpdateRecords", dict(
                        IdentityPoolId=self.pool, IdentityId=identity, DatasetName=dataset, SyncSessionToken=info[0],
                        DeviceId="setup", RecordPatches=patches)))
                    assert r is not None and r.status == 200, f"setup UpdateRecords: {r and (r.status, r.body[:300])}"
        r = self.call(serialize("RegisterDevice", dict(IdentityPoolId=self.pool, IdentityId=self.identity,
                                                       Platform="GCM", Token="fuzz-device-token")))
        assert r is not None and r.status == 200, f"setup RegisterDevice: {r and (r.status, r.body[:300])}"
        self.device_id = json.loads(r.body)["DeviceId"]
        for dataset in self.datasets[:3]:
            r = self.call(self.stream_request(self.identity, dataset, after=0))
            assert r is not None and r.status == 200 and r.body.startswith(MAGIC), \
                f"setup GET stream segment: {r and (r.status, r.body[:300])}"
            self.real_segments[("stream", dataset)] = r.body
            r = self.call(self.stream_request(self.identity, dataset, after=1))
            assert r is not None and r.status == 200, f"setup GET stream segment after 1: {r and (r.status, r.body[:300])}"
            self.real_segments[("stream-after-1", dataset)] = r.body
        for op, params in (("ListRecords", dict(IdentityPoolId=self.pool, IdentityId=self.identity, DatasetName="notes", MaxResults=1)),
                           ("ListDatasets", dict(IdentityPoolId=self.pool, IdentityId=self.identity, MaxResults=1)),
                           ("ListIdentityPoolUsage", dict(MaxResults=1))):
            r = self.call(serialize(op, params))
            assert r is not None and r.status == 200, f"setup {op}: {r and (r.status, r.body[:300])}"
            token = json.loads(r.body).get("NextToken")
            if token:
                self.next_tokens[op] = token
        r = self.call(Request("GetFeedSegment", "GET", ["segments", "feed"], [("after", "0"), ("maxBytes", "65536")], []))
        assert r is not None and r.status == 200 and r.body.startswith(MAGIC), f"setup GET feed: {r and (r.status, r.body[:300])}"
        self.real_segments[("feed", None)] = r.body
        self.identity_state.setup()
        self.surfaces.setup(tmp or os.path.dirname(os.path.abspath(server.data_dir)))

    def stream_path(self, identity, dataset):
        return ["segments", "streams", quote(self.pool, safe="~"), quote(identity, safe="~"), quote(dataset, safe="~")]

    def stream_request(self, identity, dataset, after=0, max_bytes=None):
        query = [("after", str(after))] + ([("maxBytes", str(max_bytes))] if max_bytes is not None else [])
        return Request("GetStreamSegment", "GET", self.stream_path(identity, dataset), query, [])

    def refresh_token(self, dataset, identity=None):
        identity = identity or self.identity
        r = self.call(serialize("ListRecords", dict(IdentityPoolId=self.pool, IdentityId=identity, DatasetName=dataset,
                                                    MaxResults=1024)))
        if r is None or r.status != 200:
            return ("no-token", time.monotonic(), {}, 0)
        page = json.loads(r.body)
        info = (page["SyncSessionToken"], time.monotonic(), {x["Key"]: x["SyncCount"] for x in page["Records"]},
                page["DatasetSyncCount"])
        if identity == self.identity:
            with self.lock:
                self.tokens[dataset] = info
        return info

    def token(self, dataset, rng):
        with self.lock:
            info = self.tokens.get(dataset)
        if info is None or time.monotonic() - info[1] > 60 or rng.random() < 0.05:
            info = self.refresh_token(dataset)
        return info

    def head(self, dataset, rng):
        """(offset, hash) of the identity's stream `dataset` (0, zeros when empty)."""
        with self.lock:
            known = self.heads.get(dataset)
        if known is not None and rng.random() < 0.6:
            return known
        info = self.refresh_token(dataset)
        count = info[3]
        head = (0, ZEROS)
        if count > 0:
            r = self.call(self.stream_request(self.identity, dataset, after=count - 1))
            if r is not None and r.status == 200:
                h = Header.parse(r.body)
                if h is not None:
                    head = (h.last_offset, h.last)
        with self.lock:
            self.heads[dataset] = head
        return head

    def forget_head(self, dataset):
        with self.lock:
            self.heads.pop(dataset, None)


# --------------------------------------------------------------------------------------------
# Valid requests

EDGE_U64 = [2**64 - 1, 2**64 - 2, 2**63 - 1, 2**63, 2**32]
EDGE_I64 = [2**63 - 1, 2**63 - 2, 2**31, 2**32]
EDGE_I32 = [2**31 - 1, 1]


def edge_or(rng, value, edges=EDGE_U64, ctx=None):
    """`value`, or one time in ten a number at the edge of what the parameter allows: still a
    valid request (after the end of a log, say), and the likeliest to overflow."""
    if ctx is not None and not ctx.variety:
        return value
    return rng.choice(edges) if rng.random() < 0.1 else value


def valid_request(ctx, rng, op=None):
    """A valid request of `op` (else a random operation of a surface picked by its weight),
    with the credential to sign it."""
    op = op or pick_operation(rng)
    if op in SEGMENT_OPERATIONS:
        return valid_segment_request(ctx, rng, op)
    if op in NEW_OPERATIONS:
        return valid_surface_request(ctx, rng, op)
    if op in IDENTITY_LEVEL:
        cred = rng.choice(["admin", "identity", "identity", "identity-token"])
    else:
        cred = "admin" if rng.random() < 0.85 else "identity"
    identity = ctx.identity
    if cred == "admin" and rng.random() < 0.2 and ctx.variety:
        identity = ctx.other_identity
    if rng.random() < 0.03:
        cred = "other"  # another identity's key on this identity's data: refused
    dataset = rng.choice(ctx.datasets)
    p = dict(IdentityPoolId=ctx.pool)
    if op in IDENTITY_LEVEL:
        p["IdentityId"] = identity
    if op in ("DeleteDataset", "DescribeDataset", "ListRecords", "SubscribeToDataset", "UnsubscribeFromDataset", "UpdateRecords"):
        p["DatasetName"] = dataset if op != "DeleteDataset" else rng.choice(["scratch", "scratch", dataset])
    if op in ctx.next_tokens and rng.random() < 0.3:
        p["NextToken"] = ctx.next_tokens[op]
    if op == "ListIdentityPoolUsage":
        p["MaxResults"] = rng.randint(1, 60)
        p.pop("IdentityPoolId")
    elif op == "ListDatasets":
        p["MaxResults"] = rng.randint(1, 60)
    elif op == "ListRecords":
        p["LastSyncCount"] = edge_or(rng, rng.randint(0, 8), EDGE_I64, ctx)
        p["MaxResults"] = edge_or(rng, rng.randint(1, 100), EDGE_I32, ctx)
        if rng.random() < 0.3:
            p["SyncSessionToken"] = ctx.token(dataset, rng)[0]
    elif op == "RegisterDevice":
        p["Platform"] = rng.choice(PLATFORMS)
        p["Token"] = f"token-{rng.getrandbits(32):08x}"
    elif op == "SetCognitoEvents":
        # No SyncTrigger: one would call a hook before every later UpdateRecords of the fuzzed
        # pool (and, with no hook configured, refuse them); test_sync_trigger.py covers it.
        p["Events"] = {}
    elif op == "SetIdentityPoolConfiguration":
        p["PushSync"] = {"ApplicationArns": ["arn:aws:sns:us-east-1:123456789012:app/GCM/fuzz"],
                         "RoleArn": "arn:aws:iam::123456789012:role/push"}
        p["CognitoStreams"] = {"StreamName": "fuzz-stream", "RoleArn": "arn:aws:iam::123456789012:role/streams",
                               "StreamingStatus": rng.choice(["ENABLED", "DISABLED"])}
    elif op in ("SubscribeToDataset", "UnsubscribeFromDataset"):
        p["DeviceId"] = ctx.device_id
    elif op == "UpdateRecords":
        token, _, counts, _ = ctx.token(dataset, rng)
        patches = []
        for key in rng.sample([f"k{i}" for i in range(8)], rng.randint(1, 3)):
            if rng.random() < 0.2 and key in counts:
                patches.append({"Op": "remove", "Key": key, "SyncCount": counts[key]})
            else:
                patch = {"Op": "replace", "Key": key, "Value": f"value-{rng.getrandbits(24):x}", "SyncCount": counts.get(key, 0)}
                if rng.random() < 0.5:
                    patch["DeviceLastModifiedDate"] = int(time.time()) - rng.randint(0, 1000)
                patches.append(patch)
        p.update(SyncSessionToken=token, RecordPatches=patches)
        if rng.random() < 0.7:
            p["DeviceId"] = rng.choice([ctx.device_id, "phone", "tablet"])
        if rng.random() < 0.2:
            p["ClientContext"] = base64.b64encode(b'{"client":{"app_title":"fuzz"}}').decode()
    request = serialize(op, p)
    request.cred = cred
    return request


def new_entries(rng, first_offset, count, author=None):
    now = int(time.time() * 1000)
    entries = []
    for i in range(count):
        events = []
        # Distinct keys: a change names each key once (as UpdateRecords' patches do).
        for key in rng.sample([f"k{n}" for n in range(8)], rng.randint(1, 3)):
            if rng.random() < 0.15:
                events.append(("remove", key))
            else:
                events.append(("put", key, f"seg-{rng.getrandbits(20):x}") + ((now - 5000,) if rng.random() < 0.3 else ()))
        entries.append(EntrySpec(offset=first_offset + i, time=now, author=author or "fuzz-device", events=events,
                                 sequence=1000 + i))
    return entries


def valid_segment_request(ctx, rng, op):
    dataset = rng.choice(ctx.datasets[:3])
    if op == "GetDigest":
        return Request(op, "GET", ["segments", "digest"], [], [], cred="admin" if rng.random() < 0.9 else "identity")
    if op == "GetFeedSegment":
        query = [("after", str(edge_or(rng, rng.randint(0, 40), ctx=ctx)))]
        if rng.random() < 0.7:
            query.append(("maxBytes", str(edge_or(rng, rng.choice([1, 100, 4096, 65536, 1 << 20]), ctx=ctx))))
        return Request(op, "GET", ["segments", "feed"], query, [], cred="admin" if rng.random() < 0.9 else "identity")
    if op == "GetStreamSegment":
        r = ctx.stream_request(ctx.identity, dataset, after=edge_or(rng, rng.randint(0, 8), ctx=ctx),
                               max_bytes=rng.choice([None, 1, 512, 65536, 1 << 20, edge_or(rng, 0, ctx=ctx)]))
        r.cred = rng.choice(["admin", "identity", "identity-token"])
        return r
    # POST /segments
    request = Request(op, "POST", ["segments"], [], [("Content-Type", SEGMENT_TYPE)])
    request.cred = rng.choice(["admin", "admin", "identity", "identity-token"])
    source = rng.random()
    if op == "PostSegment" and source < 0.35:
        kind = rng.choice([("stream", dataset), ("stream-after-1", dataset), ("feed", None)])
        request.body = ctx.real_segments[kind]
        request.notes.append(f"real segment {kind[0]} of {kind[1]}")
        request.segment = ("real", kind)
        return request
    if op == "PostSegment" and source < 0.45:
        request.cred = "admin"
        request.segment = ("feed", build_feed_spec(ctx, rng))
    else:
        offset, head = ctx.head(dataset, rng)
        if op == "PostSegment" and rng.random() < 0.2:
            dataset, offset, head = f"fresh-{rng.randint(0, 3)}", 0, ZEROS   # a new stream from genesis
        entries = new_entries(rng, offset + 1, rng.randint(1, 3))
        request.segment = ("stream", dict(key=stream_key(ctx.pool, ctx.identity, dataset), previous=head,
                                          entries=entries, dataset=dataset))
        ctx.forget_head(dataset)
    if op == "PostOfflineSegment":
        request.query = [("mode", "offline")]
        # Offline merges need a sync session token, as UpdateRecords does (mutations drop it).
        token = ctx.token(request.segment[1]["dataset"], rng)[0] if request.segment[0] == "stream" else "no-token"
        request.query.append(("syncSessionToken", token))
        if rng.random() < 0.5:
            request.query.append(("partial", rng.choice(["true", "false"])))
        if rng.random() < 0.6:
            request.query.append(("deviceId", rng.choice(["phone", quote(ctx.device_id, safe="~")])))
    request.body = render_segment(request.segment)
    return request


def build_feed_spec(ctx, rng):
    entries, previous = [], {}
    sequence = rng.randint(1, 1000)
    for dataset in rng.sample(ctx.datasets[:3], rng.randint(1, 2)):
        offset, head = ctx.head(dataset, rng)
        key = stream_key(ctx.pool, ctx.identity, dataset)
        previous[key] = head
        for e in new_entries(rng, offset + 1, rng.randint(1, 2)):
            e.key = key
            e.sequence = sequence
            sequence += rng.randint(1, 3)
            entries.append(e)
        ctx.forget_head(dataset)
    return dict(entries=entries, previous=previous)
