"""The HTTP fuzzer's surfaces besides Cognito Sync and /segments: valid requests of `/devices`,
`/messages` and its consumers, `/events` (SSE, the WebSocket upgrade and the CORS preflight),
`/admin/redactions`, the history browser (`/ui/` and `/admin/ui/*`) and the streams payload
endpoint (`/streams/payload/<token>`), and the server state they are built on (SurfaceState).
Cognito Identity's are in identity_requests.py."""

import base64
import json
import os
import subprocess
import time
from urllib.parse import quote

import conftest

from .identity_requests import IDENTITY_BASELINE, IDENTITY_OPERATIONS, valid_identity_request
from .requests import OPERATIONS, SEGMENT_OPERATIONS, Request

SURFACES = {
    "sync": OPERATIONS,
    "segments": SEGMENT_OPERATIONS,
    "identity": IDENTITY_OPERATIONS,
    "devices": ["SyncDevice", "SyncDeviceToken", "LoginDevice", "LogoutDevice", "NotifyDevices", "ListDevices",
                "DescribeDevice", "DeleteDevice"],
    "messages": ["SendMessage", "ReceiveMessages", "AcknowledgeMessages", "ListMessageConsumers"],
    "events": ["EventsSSE", "EventsWebSocket", "EventsPreflight"],
    "admin": ["Redact", "ListRedactions"],
    "ui": ["UI.Page", "UI.pools", "UI.streams", "UI.entries", "UI.record", "UI.diff", "UI.dataset", "UI.status"],
    "payload": ["GetStreamPayload"],
}
# How often each surface is fuzzed (its operations share its weight evenly).
WEIGHTS = {"sync": 26, "segments": 16, "identity": 18, "devices": 10, "messages": 8, "events": 7, "admin": 4, "ui": 8,
           "payload": 3}
SURFACE_OF = {op: surface for surface, ops in SURFACES.items() for op in ops}
NEW_OPERATIONS = [op for surface, ops in SURFACES.items() if surface not in ("sync", "segments") for op in ops]
# Each once, valid and unmutated, in this order (deletions after what they delete).
NEW_BASELINE = IDENTITY_BASELINE + [op for op in NEW_OPERATIONS if op not in IDENTITY_OPERATIONS]
CONSUMERS = ["fuzz-a", "fuzz-b", "fuzz.c"]
PAYLOAD_STREAM = "fuzz-payloads"


def ws_frame(opcode, payload=b"", fin=True, masked=True, rsv=0, length=None):
    """One WebSocket frame as a client sends it (masked), or with its fields at odds."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    bit = 0x80 if masked else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + (n & (2**64 - 1)).to_bytes(8, "big")
    if not masked:
        return head + payload
    key = b"\x37\xfa\x21\x3d"
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def valid_frames(rng):
    """What a browser may send on an event stream: a ping, a pong, a text message, a close."""
    frames = [ws_frame(0x9, b"ping"), ws_frame(0xA, b""), ws_frame(0x1, b"hello")]
    frames = rng.sample(frames, rng.randint(1, 3))
    if rng.random() < 0.5:
        frames.append(ws_frame(0x8, (1000).to_bytes(2, "big") + b"bye"))
    return b"".join(frames)


def mutant_frames(rng):
    """Frames at odds with RFC 6455: oversized control frames, lengths at their limits,
    unmasked, reserved opcodes and bits, fragments, invalid UTF-8 and close codes, truncations."""
    choice = rng.randrange(12)
    if choice == 0:
        return ws_frame(0x9, b"p" * rng.choice([126, 1000, 70000]))          # a control frame over 125 bytes
    if choice == 1:
        return ws_frame(0x1, b"x", length=rng.choice([2**63, 2**63 - 1, 2**64 - 1, 2**32, 1 << 24]))   # a length it never sends
    if choice == 2:
        return ws_frame(0x1, b"unmasked", masked=False)
    if choice == 3:
        return ws_frame(rng.choice([0x3, 0x7, 0xB, 0xF]), b"reserved")
    if choice == 4:
        return ws_frame(0x1, b"rsv", rsv=rng.randint(1, 7))
    if choice == 5:
        return ws_frame(0x9, b"frag", fin=False)                              # a fragmented control frame
    if choice == 6:
        return ws_frame(0x0, b"continuation without a start") + ws_frame(0x1, b"a", fin=False) + ws_frame(0x1, b"b")
    if choice == 7:
        return ws_frame(0x1, rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\x80"]))   # invalid UTF-8 text
    if choice == 8:
        code = rng.choice([0, 999, 1004, 1005, 1006, 1015, 2999, 5000, 65535])
        return ws_frame(0x8, code.to_bytes(2, "big") + rng.choice([b"", b"\xff", b"r" * 123])) if rng.random() < 0.8 \
            else ws_frame(0x8, b"\x03")                                        # a close with one byte
    if choice == 9:
        return ws_frame(0x2, bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 4096]))) * rng.choice([1, 300]))
    if choice == 10:
        return b"".join(ws_frame(0x9, b"p") for _ in range(rng.choice([100, 2000])))
    frame = ws_frame(0x1, b"truncated frame")
    return frame[:rng.randrange(1, len(frame))]


def pick_operation(rng):
    """A surface by its weight, then one of its operations."""
    surfaces = list(WEIGHTS)
    surface = rng.choices(surfaces, weights=[WEIGHTS[s] for s in surfaces])[0]
    return rng.choice(SURFACES[surface])


def json_request(op, method, segments, body, cred, query=()):
    return Request(op, method, segments, list(query), [("Content-Type", "application/json")],
                   json.dumps(body).encode() if body is not None else b"", cred=cred)


class SurfaceState:
    """Devices of the fuzzed identity (one created, logged in and given a token; one to log in
    and out), message consumers, the feed position reached at setup, an identity whose values
    redactions erase, and a real streams payload token."""

    def __init__(self, ctx, rng):
        self.ctx = ctx
        self.device = None        # created and logged in by the identity, with a token
        self.second = None        # logged in and out by the fuzzed requests
        self.doomed = []          # devices made to be deleted
        self.sent = None          # (body) of a message sent, to send again (a replay)
        self.feed_last = 0        # a change-feed position that exists
        self.redacted = f"us-east-1:{rng.getrandbits(32):08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        self.payload_token = "none"
        self.payload_pool = f"us-east-1:{rng.getrandbits(32):08x}-1111-4000-8000-{rng.getrandbits(48):012x}"

    def call(self, request):
        return self.ctx.call(request, request.cred)

    def ok(self, request, what):
        r = self.call(request)
        assert r is not None and 200 <= r.status < 300, f"setup {what}: {r and (r.status, r.body[:300])}"
        return json.loads(r.body) if r.body[:1] == b"{" else None

    def setup(self, tmp):
        ctx = self.ctx
        self.device = self.new_device("identity")
        assert self.device, "setup POST /devices/sync failed"
        self.ok(json_request("LoginDevice", "POST", ["devices", "login"], {"DeviceCode": self.device, "SubscribeAll": True}, "identity"),
                "POST /devices/login")
        self.ok(json_request("SyncDeviceToken", "POST", ["devices", "sync-token"], {"DeviceCode": self.device, "Token": "fuzz-fcm-token-0"},
                             "identity"), "POST /devices/sync-token")
        self.second = self.new_device("identity")
        sent = self.ok(self.message_body(ctx_rng(ctx), "setup"), "POST /messages")
        self.feed_last = sent["Sequence"]
        self.ok(json_request("AcknowledgeMessages", "POST", ["messages", "ack"], {"Consumer": CONSUMERS[0], "Sequence": 1}, "admin"),
                "POST /messages/ack")
        from .requests import serialize
        for dataset in ("r0", "r1"):
            for round_ in range(2):
                info = ctx.refresh_token(dataset, self.redacted)
                patches = [{"Op": "replace", "Key": f"k{i}", "Value": f"secret-{round_}-{i}", "SyncCount": info[2].get(f"k{i}", 0)}
                           for i in range(3)]
                self.ok(serialize("UpdateRecords", dict(IdentityPoolId=ctx.pool, IdentityId=self.redacted, DatasetName=dataset,
                                                        SyncSessionToken=info[0], RecordPatches=patches)), "UpdateRecords to redact")
        self.payload_token = self.make_payload_token(tmp)

    def new_device(self, cred):
        r = self.call(json_request("SyncDevice", "POST", ["devices", "sync"], {"Platform": "GCM", "OsVersion": "14", "Model": "fuzz"}, cred))
        return json.loads(r.body)["DeviceCode"] if r is not None and r.status == 200 else None

    def message_body(self, rng, tag):
        body = {"DeviceCode": self.device, "MessageId": f"m-{tag}-{rng.getrandbits(64):016x}", "TimeToLive": 3600,
                "SentAt": round(time.time(), 3), "Data": {"event": "fuzz", "n": str(rng.randint(0, 99))}}
        return json_request("SendMessage", "POST", ["messages"], body, "identity")

    def make_payload_token(self, tmp):
        """A real `/streams/payload/` token: a record of over 1 MB streamed to a directory sink."""
        ctx = self.ctx
        folder = os.path.join(tmp, "payload-sink")
        out = subprocess.run([conftest.BINARY, "streams", "configure", "--stream-name", PAYLOAD_STREAM, "--directory", folder,
                              "--data", ctx.fuzzer.server.data_dir], capture_output=True, timeout=60)
        assert out.returncode == 0, f"setup streams configure: {out.stderr.decode(errors='replace')}"
        from .requests import serialize
        self.ok(serialize("SetIdentityPoolConfiguration", dict(IdentityPoolId=self.payload_pool, CognitoStreams=dict(
            StreamName=PAYLOAD_STREAM, StreamingStatus="ENABLED"))), "SetIdentityPoolConfiguration (payloads)")
        identity = self.redacted
        token = self.ok(serialize("ListRecords", dict(IdentityPoolId=self.payload_pool, IdentityId=identity, DatasetName="big")),
                        "ListRecords (payloads)")["SyncSessionToken"]
        self.ok(serialize("UpdateRecords", dict(IdentityPoolId=self.payload_pool, IdentityId=identity, DatasetName="big",
                                                SyncSessionToken=token, RecordPatches=[
                                                    {"Op": "replace", "Key": "big", "Value": 'é"' * 300_000, "SyncCount": 0}])),
                "UpdateRecords of a large record")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                with open(os.path.join(folder, name)) as f:
                    for line in f:
                        url = json.loads(line).get("kinesisSyncRecordsURL") if line.strip() else None
                        if url:
                            return url.rsplit("/", 1)[1]
            time.sleep(0.05)
        raise AssertionError("setup: no record by reference reached the directory sink within 60 s")


def ctx_rng(ctx):
    import random
    return random.Random(f"{ctx.seed}:surfaces")


def valid_surface_request(ctx, rng, op):
    """A valid request of operation `op` of a surface besides Cognito Sync and /segments."""
    if op in IDENTITY_OPERATIONS:
        return valid_identity_request(ctx, rng, op)
    from .valid_requests import edge_or
    s = ctx.surfaces
    variety = ctx.variety
    pool, identity = ctx.pool, ctx.identity
    admin = rng.random() < 0.3
    if op == "SyncDevice":
        body = {"DeviceCode": rng.choice([s.device, s.second]), "AppVersion": f"1.{rng.randint(0, 99)}", "Locale": "de_CH",
                "Settings": {"theme": rng.choice(["dark", "light"])}}
        if rng.random() < 0.2 and variety:   # a new device (an identity may create 100)
            body = {"Platform": rng.choice(["APNS", "GCM", "ADM", "WEBHOOK"]), "Model": "fuzz"}
            admin = False
        if admin:
            body["IdentityPoolId"] = pool
        return json_request(op, "POST", ["devices", "sync"], body, "admin" if admin else "identity")
    if op == "SyncDeviceToken":
        body = {"DeviceCode": s.device, "Token": f"fuzz-fcm-token-{rng.randint(0, 3)}"}
        if admin:
            body["IdentityPoolId"] = pool
        return json_request(op, "POST", ["devices", "sync-token"], body, "admin" if admin else "identity")
    if op == "LoginDevice":
        return json_request(op, "POST", ["devices", "login"], {"DeviceCode": s.second, "SubscribeAll": rng.random() < 0.5}, "identity")
    if op == "LogoutDevice":
        body = {"DeviceCode": s.second}
        if admin:
            body["IdentityPoolId"] = pool
        return json_request(op, "POST", ["devices", "logout"], body, "admin" if admin else "identity")
    if op == "NotifyDevices":
        return json_request(op, "POST", ["devices", "notify"], {"IdentityPoolId": pool, "IdentityId": identity,
                                                                "Data": {"kind": "fuzz", "n": str(rng.randint(0, 9))}}, "admin")
    if op == "ListDevices":
        if admin:
            return Request(op, "GET", ["devices"], [("IdentityPoolId", quote(pool)), ("IdentityId", quote(identity))], [], cred="admin")
        query = [("IdentityId", quote(identity))] if rng.random() < 0.3 else []
        return Request(op, "GET", ["devices"], query, [], cred=rng.choice(["identity", "identity-token"]))
    if op in ("DescribeDevice", "DeleteDevice"):
        code, cred = rng.choice([s.device, s.second]), "admin" if admin else "identity"
        if op == "DeleteDevice":   # a device made for it, by another identity of the pool (each may make 100)
            code, cred = s.new_device("other") or "00000000-0000-4000-8000-000000000000", "other"
        query = [("IdentityPoolId", quote(pool))] if cred == "admin" else []
        return Request(op, "GET" if op == "DescribeDevice" else "DELETE", ["devices", code], query, [], cred=cred)
    if op == "SendMessage":
        if s.sent is not None and rng.random() < 0.2:
            request = json_request(op, "POST", ["messages"], None, "identity")
            request.body = s.sent
            request.notes.append("the body of an earlier message (a resend)")
            return request
        request = s.message_body(rng, "f")
        body = json.loads(request.body)
        body["TimeToLive"] = edge_or(rng, rng.randint(60, 86400), [2_419_200, 1_000_000], ctx)
        if rng.random() < 0.3:
            del body["SentAt"]
        request.body = json.dumps(body).encode()
        s.sent = request.body
        return request
    if op == "ReceiveMessages":
        query = [("consumer", rng.choice(CONSUMERS))]
        if rng.random() < 0.8:
            query.append(("limit", str(edge_or(rng, rng.randint(1, 100), [1, 1000], ctx))))
        return Request(op, "GET", ["messages"], query, [], cred="admin")
    if op == "AcknowledgeMessages":
        return json_request(op, "POST", ["messages", "ack"], {"Consumer": rng.choice(CONSUMERS),
                                                              "Sequence": rng.randint(0, s.feed_last)}, "admin")
    if op == "ListMessageConsumers":
        return Request(op, "GET", ["messages", "consumers"], [], [], cred="admin")
    if op in ("EventsSSE", "EventsWebSocket"):
        cred = "admin" if admin else rng.choice(["identity", "identity-token"])
        params = []
        if cred == "admin" or rng.random() < 0.3:
            params += [("identityPoolId", pool), ("identityId", identity)]
        if rng.random() < 0.4:
            params.append(("datasetName", rng.choice(ctx.datasets)))
        if rng.random() < 0.4:
            params.append(("lastEventId", str(rng.randint(0, s.feed_last))))
        request = Request(op, "GET", ["events"], [(k, quote(v, safe="~")) for k, v in params], [], cred=cred, stream=True)
        request.presign = rng.random() < 0.4
        if rng.random() < 0.2:
            request.headers.append(("Last-Event-ID", str(rng.randint(0, s.feed_last))))
        if op == "EventsWebSocket":
            key = base64.b64encode(rng.getrandbits(128).to_bytes(16, "big")).decode()
            request.unsigned_headers += [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", key),
                                         ("Sec-WebSocket-Version", "13")]
            if rng.random() < 0.6:
                request.after_upgrade = valid_frames(rng)
        return request
    if op == "EventsPreflight":
        return Request(op, "OPTIONS", ["events"], [], [("Origin", "https://app.example"), ("Access-Control-Request-Method", "GET"),
                                                     ("Access-Control-Request-Headers", "last-event-id")], sign=False)
    if op == "Redact":
        body = {"IdentityPoolId": pool, "IdentityId": s.redacted, "Reason": f"fuzz request {rng.getrandbits(16)}"}
        if rng.random() < 0.9 or not variety:
            body["DatasetName"] = rng.choice(["r0", "r1"])
            if rng.random() < 0.8:
                body["Key"] = f"k{rng.randint(0, 3)}"
        return json_request(op, "POST", ["admin", "redactions"], body, "admin")
    if op == "ListRedactions":
        return Request(op, "GET", ["admin", "redactions"], [("IdentityPoolId", quote(pool))], [], cred="admin")
    if op == "UI.Page":
        request = Request(op, "GET", ["ui", ""], [], [], cred="admin")
        request.presign = rng.random() < 0.8
        return request
    if op.startswith("UI."):
        what = op.split(".", 1)[1]
        dataset = rng.choice(ctx.datasets[:3])
        query = []
        if what != "pools" and (what != "status" or rng.random() < 0.7):
            query = [("pool", pool), ("identity", rng.choice([identity, ctx.other_identity]))]
            if what != "streams":
                query.append(("dataset", dataset))
        if what == "streams" and rng.random() < 0.3:
            query.append(("after", f"{identity}/{dataset}"))
        if what in ("entries", "record") and rng.random() < 0.6:
            query.append(("limit", str(edge_or(rng, rng.randint(1, 500), [1, 500], ctx))))
        if what in ("entries", "record", "diff") and (what == "diff" or rng.random() < 0.5):
            query.append(("from", str(edge_or(rng, rng.randint(1, 2), [1, 2**63 - 1], ctx))))
        if what == "record":
            query.append(("key", f"k{rng.randint(0, 7)}"))
        if what == "diff" and rng.random() < 0.6:
            query.append(("to", "2"))
        if what == "dataset" and rng.random() < 0.7:
            query.append(("syncCount", str(edge_or(rng, rng.randint(0, 2), [2**63 - 1], ctx))))
        return Request(op, "GET", ["admin", "ui", what], [(k, quote(v, safe="~")) for k, v in query], [], cred="admin")
    if op == "GetStreamPayload":
        return Request(op, "GET", ["streams", "payload", s.payload_token], [], [], sign=False)
    raise ValueError(f"no valid request of {op}")
