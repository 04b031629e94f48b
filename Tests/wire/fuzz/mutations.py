"""Mutations of a valid request for the HTTP fuzzer: JSON, path, query, headers and body
bytes (segment bodies: segment_mutations.py), and `mutate`, which applies 1-3 of them."""

import base64
from urllib.parse import quote

from .identity_requests import IDENTITY_SERVICE, mutant_jwt, mutate_target
from .requests import Obj, Raw, from_json, to_json
from .segment_mutations import mutate_segment
from .surfaces import mutant_frames
from .segments import SEGMENT_TYPE
from .values import (BAD_ESCAPES, INVALID_UTF8, LIMIT_NUMBER_TOKENS, LIMIT_QUERY_NUMBERS, mutant_json_value, mutant_segment,
                     mutant_token, random_json_value, short)

# --------------------------------------------------------------------------------------------
# Mutations

def json_locations(value, path="$"):
    """(container, key or index, path) of every value below the root."""
    out = []
    if isinstance(value, Obj):
        for i, (k, v) in enumerate(value):
            here = f"{path}.{k}"
            out.append((value, i, here))
            out.extend(json_locations(v, here))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            here = f"{path}[{i}]"
            out.append((value, i, here))
            out.extend(json_locations(v, here))
    return out


def mutate_json(request, rng):
    try:
        _mutate_json(request, rng)
    except RecursionError:   # a body nested deeper than Python recurses: start from an object
        request.body = b"{}"
        _mutate_json(request, rng)


def _mutate_json(request, rng):
    try:
        root = from_json(request.body) if request.body.strip() else Obj()
    except ValueError:
        root = Obj()
    if not isinstance(root, (Obj, list)):
        root = Obj()
    locations = json_locations(root)
    choice = rng.randrange(10)
    if choice <= 4 and locations:
        container, index, path = rng.choice(locations)
        if isinstance(container, Obj):
            name, old = container[index]
            new = mutant_json_value(rng, old)
            container[index] = (name, new)
        else:
            old = container[index]
            new = mutant_json_value(rng, old)
            container[index] = new
        request.notes.append(f"json {path}={short(new)}")
    elif choice == 5 and locations:
        container, index, path = rng.choice(locations)
        del container[index]
        request.notes.append(f"json removed {path}")
    elif choice == 6 and isinstance(root, Obj) and root:
        name, value = rng.choice(root)
        root.append((name, mutant_json_value(rng, value)))
        request.notes.append(f"json duplicate member {name}")
    elif choice == 7:
        name = rng.choice(["Unknown", "", "recordpatches", "SYNCSESSIONTOKEN", "__proto__", "\u0000", "Key"])
        if isinstance(root, Obj):
            root.append((name, random_json_value(rng)))
        request.notes.append(f"json extra member {name!r}")
    elif choice == 8:   # the whole body another JSON type
        root = mutant_json_value(rng, root)
        request.notes.append(f"json body={short(root)}")
    else:   # many record patches, keys and values at their limits
        patches = []
        for i in range(rng.choice([1, 2, 100, 1025, 3000])):
            patches.append(Obj([("Op", rng.choice(["replace", "remove", "replace"])),
                                ("Key", rng.choice([f"p{i}", "", "k" * 1024, "k" * 1025, "é" * 600, "\u0000", f"k{i % 8}"])),
                                ("Value", rng.choice(["v", "", "x" * 1000, "é" * 10])),
                                ("SyncCount", Raw(rng.choice(["0", "0", "1", "-1", "18446744073709551615", "9223372036854775807"]).encode()))]))
        if isinstance(root, Obj):
            root = Obj([(k, v) for k, v in root if k != "RecordPatches"] + [("RecordPatches", patches)])
        request.notes.append(f"json RecordPatches: {len(patches)} patches at limits")
    request.body = to_json(root)
    if not any(k.lower() == "content-type" for k, _ in request.headers):
        request.headers.append(("Content-Type", "application/json"))


def mutate_path(request, rng):
    segments = request.segments
    choice = rng.randrange(10)
    if choice <= 4 and segments:
        i = rng.randrange(len(segments))
        new = mutant_segment(rng, segments[i])
        request.notes.append(f"path[{i}] {segments[i][:40]!r} -> {new[:60]!r}" + (f"...({len(new)} chars)" if len(new) > 60 else ""))
        segments[i] = new
    elif choice == 5:
        i = rng.randint(0, len(segments))
        new = mutant_segment(rng, "x")
        segments.insert(i, new)
        request.notes.append(f"path inserted [{i}] {new[:60]!r}")
    elif choice == 6 and len(segments) > 1:
        i = rng.randrange(len(segments))
        request.notes.append(f"path removed [{i}] {segments[i][:40]!r}")
        del segments[i]
    elif choice == 7:
        segments.append("")
        request.notes.append("path trailing slash")
    elif choice == 8:
        request.method = rng.choice(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "get", "TRACE", "CONNECT2", "X" * 300])
        request.notes.append(f"method {request.method[:20]}")
    else:
        i = rng.randrange(len(segments) + 1)
        segments.insert(i, "")
        request.notes.append(f"path empty segment at [{i}]")


def mutate_query(request, rng):
    query = request.query
    names = [k for k, _ in query] or ["after"]
    known = ["after", "maxBytes", "mode", "partial", "deviceId", "lastSyncCount", "maxResults", "nextToken",
             "syncSessionToken", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Algorithm",
             "X-Amz-SignedHeaders", "X-Amz-Security-Token", "x-amz-content-sha256", "consumer", "limit", "identityPoolId",
             "identityId", "datasetName", "lastEventId", "IdentityPoolId", "IdentityId", "pool", "identity", "dataset",
             "from", "to", "key", "syncCount", "X-Amz-Expires"]
    tokens = [i for i, (k, _) in enumerate(query) if k in ("nextToken", "syncSessionToken", "lastEventId", "consumer")]
    if tokens and rng.random() < 0.5:
        i = rng.choice(tokens)
        k, v = query[i]
        new = mutant_token(rng, v or "")
        query[i] = (k, quote(new, safe="~") if rng.random() < 0.8 else new)
        request.notes.append(f"query {k} token mutated to {new[:60]!r}")
        return
    choice = rng.randrange(9)
    if choice <= 2:
        # Mostly a parameter the endpoint reads, mostly a number at a limit.
        name = rng.choice(names) if rng.random() < 0.75 else rng.choice(known[:9])
        if rng.random() < 0.6:
            value = rng.choice(LIMIT_QUERY_NUMBERS)
        else:
            value = rng.choice(BAD_ESCAPES + ["", "true", "TRUE", "offline", "OFFLINE", "online", "%F0%9F%98%80",
                                              "a" * rng.choice([1025, 65536])])
        query[:] = [(k, v) for k, v in query if k != name] + [(name, value)]
        request.notes.append(f"query {name}={value[:40]!r}" + (f"...({len(value)})" if len(value) > 40 else ""))
    elif choice == 3 and query:
        k, v = rng.choice(query)
        other = rng.choice(LIMIT_QUERY_NUMBERS + [v or "", "", "offline", "true"])
        query.append((k, other))
        request.notes.append(f"query duplicated {k} (={(v or '')[:20]!r} and ={other[:20]!r})")
    elif choice == 4:
        name = rng.choice(known)
        query.append((name, rng.choice(["", "x", "0", "AWS4-HMAC-SHA256", "%FF"])))
        request.notes.append(f"query extra {name}")
    elif choice == 5 and query:
        i = rng.randrange(len(query))
        request.notes.append(f"query removed {query[i][0]}")
        del query[i]
    elif choice == 6:
        query.append((rng.choice(["", "=", "&", "a", rng.choice(BAD_ESCAPES), "%61fter"]), rng.choice([None, "", "1"])))
        request.notes.append(f"query odd pair {query[-1]!r}")
    elif choice == 7:
        name = rng.choice(names)
        query[:] = [(k, v) for k, v in query if k != name] + [(name, None)]
        request.notes.append(f"query {name} without '='")
    else:
        for _ in range(rng.choice([100, 1000])):
            query.append((rng.choice(names + ["p"]), str(rng.randint(0, 9))))
        request.notes.append(f"query {len(query)} parameters")


def mutate_headers(request, rng):
    choice = rng.randrange(9)
    if choice == 0:
        ct = rng.choice(["text/plain", "", "application/x-amz-json-1.1", SEGMENT_TYPE, "application/json; charset=latin1",
                         "multipart/form-data; boundary=x", "application/json" + "x" * 5000])
        request.headers = [(k, v) for k, v in request.headers if k.lower() != "content-type"] + [("Content-Type", ct)]
        request.notes.append(f"content-type {ct[:40]!r}")
    elif choice == 1:
        value = rng.choice(["", "not base64", "e30=", "a" * 8192, base64.b64encode(b"\xff\xfe").decode(), "%FF"])
        request.headers.append(("x-amz-Client-Context", value))
        request.notes.append(f"x-amz-Client-Context {value[:30]!r}")
    elif choice == 2:
        enc = rng.choice(["gzip", "zstd", "br", "deflate", "identity", "x"])
        request.headers.append(("Content-Encoding", enc))
        request.notes.append(f"content-encoding {enc}")
    elif choice == 3:
        request.unsigned_headers.append(("Expect", "100-continue"))
        request.notes.append("expect 100-continue")
    elif choice == 4:
        request.chunked = True
        request.notes.append("chunked body")
    elif choice == 5:
        if not request.body and rng.random() < 0.5:
            request.presign = True
            request.notes.append("presigned URL (SigV4 in the query)")
        else:
            request.http10 = True
            request.notes.append("HTTP/1.0")
    elif choice == 6:
        name = rng.choice(["Host", "X-Amz-Date", "Authorization", "X-Amz-Security-Token", "Content-Length"])
        request.drop_headers.append(name)
        request.notes.append(f"without {name}")
    elif choice == 7:
        name = rng.choice(["X-Amz-Date", "Host", "Authorization", "X-Amz-Content-SHA256", "Content-Type"])
        value = rng.choice(["", "x", "20991231T235959Z", "AWS4-HMAC-SHA256 Credential=", "%FF", "a" * 4096,
                            "UNSIGNED-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"])
        request.unsigned_headers.append((name, value))
        request.notes.append(f"extra unsigned {name}: {value[:30]!r}")
    else:
        for i in range(rng.choice([10, 100, 300])):
            request.headers.append((f"X-Fuzz-{i}", "v" * rng.choice([1, 100])))
        request.notes.append("many headers")


def mutate_bytes(request, rng):
    body = bytearray(request.body)
    choice = rng.randrange(8)
    if choice == 0 and body:
        n = rng.randrange(len(body))
        body = body[:n]
        request.notes.append(f"body truncated to {n} bytes")
    elif choice == 1 and body:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
        request.notes.append("body bits flipped")
    elif choice == 2:
        i = rng.randint(0, len(body))
        bad = rng.choice(INVALID_UTF8)
        body[i:i] = bad
        request.notes.append(f"body invalid UTF-8 {bad!r} at {i}")
    elif choice == 3:
        body = bytearray(rng.getrandbits(8) for _ in range(rng.choice([1, 16, 300, 4096])))
        request.notes.append(f"body {len(body)} random bytes")
    elif choice == 4:
        body = bytearray()
        request.notes.append("body empty")
    elif choice == 5:
        body = bytearray(b"\xef\xbb\xbf") + body
        request.notes.append("body BOM")
    elif choice == 6:
        try:
            body = bytearray(bytes(body).decode("utf-8").encode(rng.choice(["utf-16", "utf-32", "utf-16-be"])))
            request.notes.append("body re-encoded UTF-16/32")
        except UnicodeError:
            body += b"\x00"
            request.notes.append("body NUL appended")
    else:
        body += rng.choice([b"x", b"\x00", b"}", b" ", b"garbage" * 100, b"\xff" * 3])
        request.notes.append("body trailing bytes")
    request.body = bytes(body)


# Members and path segments that carry a token, a code or an id made by the server.
TOKEN_MEMBERS = {"DeviceCode", "Token", "NextToken", "MessageId", "SyncSessionToken", "cognito-identity.amazonaws.com",
                 "IdentityId", "IdentityPoolId", "Consumer", "DeveloperUserIdentifier", "SourceUserIdentifier"}
TOKEN_PATHS = {"GetStreamPayload": 2, "DescribeDevice": 1, "DeleteDevice": 1}


def mutate_token(request, rng):
    """A token, code or id the server made (a JSON member, a path segment or a query value),
    damaged: truncated, a character changed, padded, doubled, another's pieces, garbage."""
    if request.op in TOKEN_PATHS and len(request.segments) > TOKEN_PATHS[request.op] and rng.random() < 0.7:
        i = TOKEN_PATHS[request.op]
        new = mutant_token(rng, request.segments[i])
        request.segments[i] = quote(new, safe="~") if rng.random() < 0.8 else new
        request.notes.append(f"path token -> {new[:60]!r}" + (f"...({len(new)})" if len(new) > 60 else ""))
        return
    try:
        root = from_json(request.body) if request.body[:1] == b"{" else None
        found = [(c, i, p) for c, i, p in json_locations(root) if isinstance(c, Obj) and c[i][0] in TOKEN_MEMBERS
                 and isinstance(c[i][1], str)] if root is not None else []
        if found:
            container, index, path = rng.choice(found)
            old = container[index][1]
            new = mutant_jwt(rng, old) if old.count(".") == 2 and rng.random() < 0.6 else mutant_token(rng, old)
            container[index] = (container[index][0], new)
            request.body = to_json(root)
            request.notes.append(f"json token {path} -> {new[:60]!r}" + (f"...({len(new)})" if len(new) > 60 else ""))
            return
    except (ValueError, RecursionError):   # a body nested deeper than Python recurses (an earlier mutation)
        pass
    mutate_query(request, rng)


NUMBER_TOKENS = LIMIT_NUMBER_TOKENS + ["1.7976931348623157e308", "-1.7976931348623157e308", "9.3e18", "-9.3e18", "1e19",
                                       "-1e19", "2419200.5", "2419201", "86401", "61", "1e-7", "-0.5", "9007199254740993"]


def mutate_number(request, rng):
    """A number of the request at a limit: a JSON number member (or any member) as a limit token,
    or NaN/Infinity as a string; else a query value that is a number."""
    try:
        root = from_json(request.body) if request.body[:1] == b"{" else None
        spots = [(c, i, p) for c, i, p in json_locations(root) if isinstance(c, Obj)] if root is not None else []
        numbers = [x for x in spots if isinstance(x[0][x[1]][1], (int, float)) and not isinstance(x[0][x[1]][1], bool)]
        if spots:
            container, index, path = rng.choice(numbers or spots)
            value = Raw(rng.choice(NUMBER_TOKENS).encode()) if rng.random() < 0.85 else rng.choice(["NaN", "Infinity", "-0", "1e400"])
            container[index] = (container[index][0], value)
            request.body = to_json(root)
            request.notes.append(f"json number {path}={short(value)}")
            return
    except (ValueError, RecursionError):
        pass
    numeric = [i for i, (_, v) in enumerate(request.query) if v and v.lstrip("-").isdigit()]
    if numeric:
        i = rng.choice(numeric)
        value = rng.choice(LIMIT_QUERY_NUMBERS)
        request.query[i] = (request.query[i][0], value)
        request.notes.append(f"query number {request.query[i][0]}={value!r}")
        return
    mutate_query(request, rng)


def mutate_frames(request, rng):
    """WebSocket frames at odds with RFC 6455 after the upgrade, before or after valid ones."""
    bad = mutant_frames(rng)
    where = rng.randrange(3)
    request.after_upgrade = bad + request.after_upgrade if where == 0 else request.after_upgrade + bad
    request.notes.append(f"websocket frames {bad[:24]!r}" + (f"...({len(bad)} bytes)" if len(bad) > 24 else ""))


def mutate_auth(request, rng):
    """The signature: expired or from the future, garbled, for another service, an expired or
    odd presigned URL, another credential, none, or a signature on a request that needs none."""
    choice = rng.randrange(8)
    if choice == 0:
        request.skew = rng.choice([-86400 * 8, -3600, -901, 901, 3600, 86400 * 365])
        request.notes.append(f"signed with the clock {request.skew:+d} s off")
    elif choice == 1:
        request.garble = True
        request.notes.append("signature garbled")
    elif choice == 2:
        request.service = "cognito-sync" if request.service == IDENTITY_SERVICE else rng.choice([IDENTITY_SERVICE, "s3", ""])
        request.notes.append(f"signed for service {request.service!r}")
    elif choice == 3 and not request.body:
        request.presign = True
        request.expires, request.skew = rng.choice([(1, -60), (900, -3600), (0, 0), (604801, 0), (-1, 0), (2**31, 0), (604800, -604700)])
        request.notes.append(f"presigned, X-Amz-Expires {request.expires}, clock {request.skew:+d} s")
    elif choice == 4:
        request.cred = rng.choice(["admin", "identity", "identity-token", "other"])
        request.notes.append(f"signed as {request.cred}")
    elif choice == 5:
        request.sign = not request.sign
        request.notes.append("signed (it needs no signature)" if request.sign else "unsigned")
    elif choice == 6:
        request.unsigned_headers.append(("X-Amz-Security-Token", rng.choice(["", "x", "a" * 5000, "%FF", "AAAA"])))
        request.notes.append("an unsigned X-Amz-Security-Token")
    else:
        request.headers.append(("X-Amz-Date", rng.choice(["20000101T000000Z", "99991231T235959Z", "2026-01-01", "", "0"])))
        request.notes.append("a second, signed X-Amz-Date")


def mutate(request, rng, ctx):
    """Applies 1-3 mutations to a valid request; 8 % stay valid."""
    if rng.random() < 0.08:
        request.notes.append("unmutated")
        return request
    is_segment_post = request.op in ("PostSegment", "PostOfflineSegment")
    kinds = ["path", "query", "headers", "auth"] + ["segment"] * (6 if is_segment_post else 0)
    # A bodiless request gets a body rarely (most endpoints refuse one, and stop there).
    kinds += ["bytes", "json"] if request.body or rng.random() < 0.3 else []
    if request.body[:1] == b"{":
        kinds += ["json"] * 3 + ["number"] * 2
    if any(v and v.isdigit() for _, v in request.query):
        kinds += ["number"]
    if request.op.startswith("Identity."):
        kinds += ["target"] * 2
    if request.op == "EventsWebSocket":
        kinds += ["frames"] * 3
    if request.op.startswith("Identity.") or request.op in TOKEN_PATHS or b"DeviceCode" in request.body or \
            any(k in ("lastEventId", "consumer") for k, _ in request.query):
        kinds += ["token"] * 2
    segment_done = False
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        kind = rng.choice(kinds)
        if kind == "json" and is_segment_post and rng.random() < 0.8:
            kind = "segment"
        if kind == "segment":   # once: a second one would rebuild the segment and undo the first
            if segment_done:
                kind = "bytes"
            segment_done = True
        {"path": mutate_path, "query": mutate_query, "headers": mutate_headers, "bytes": mutate_bytes,
         "json": mutate_json, "segment": mutate_segment, "auth": mutate_auth, "target": mutate_target,
         "token": mutate_token, "number": mutate_number, "frames": mutate_frames}[kind](request, rng)
    return request
