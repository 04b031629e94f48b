"""Values for the HTTP fuzzer's mutations: values at their limits, and generators of odd JSON
values, path segments and tokens."""

import base64

from .requests import Obj, Raw

# --------------------------------------------------------------------------------------------
# Values at their limits

LIMIT_INTS = [0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
              2**64 - 1, 2**64, 10**30]
# As JSON number tokens (some are not integers, one is not representable as a double).
LIMIT_NUMBER_TOKENS = [str(n) for n in LIMIT_INTS] + [
    "1e308", "-1e308", "1e400", "-1e400", "-0", "-0.0", "1.5", "-1.5", "0.1", "1e-400", "4.9e-324",
    "1E2", "1.0", "9.223372036854775807e18", "1.8446744073709552e19", "123456789012345678901234567890.5"]
# As query values (decimal numbers at their limits, and things that are almost numbers).
LIMIT_QUERY_NUMBERS = [str(n) for n in LIMIT_INTS] + [
    "18446744073709551615", "18446744073709551614", "18446744073709551616", "99999999999999999999999",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e308", "-0", "1.5", "+1",
    "%2B1", "0x10", "01", "00000000000000000000001", "1_000", "%20%31", "1%20", "NaN", "inf", "-", "",
    "%D9%A1", "%EF%BC%91"]
BAD_ESCAPES = ["%FF", "%C0%80", "%C0%AF", "%E0%80%AF", "%ED%A0%80", "%F4%90%80%80", "%F8%88%80%80%80",
               "%00", "a%00b", "%", "%G0", "%2", "%%", "%FE%FF", "%80", "%EF%BB%BF"]
PATH_SEGMENTS = ["", ".", "..", "%2e", "%2E%2E", ".%2E", "...", "%2F", "..%2F..", "a%2Fb", "%5C", "%20", "+", "%2B",
                 "%3A", ":", "~", "_syncledger:0", "_syncledger%3A0", "us-east-1:0", "us-east-1%3A", "%3Ax",
                 "segments", "identitypools", "identities", "datasets", "records", "subscriptions", "feed",
                 "streams", "digest", "health", "0", "-1", "18446744073709551615", "%F0%9F%98%80",
                 "%C3%A9", "e%CC%81", "%E2%80%AE", "%EF%BF%BF", "%EF%BB%BF"] + BAD_ESCAPES
RAW_PATH_SEGMENTS = ["\udcff", "\udcc0\udc80", "é", "\u202e", "a b", "\x7f", "\t", "a\"b", "<x>", "{x}", "|", "^", "`"]
INVALID_UTF8 = [b"\xff", b"\xfe", b"\xc0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xc3", b"\xe2\x82", b"a\xffb"]
JSON_ESCAPES = [b'"\\u0000"', b'"\\ud800"', b'"\\udfff"', b'"\\udc00\\ud800"', b'"\\uD83D\\uDE00"', b'"\\u00"',
                b'"\\x41"', b'"\\/"', b'"\\uFFFF"', b'"\\uFEFF"', b'"a\\u0000b"', b'"\\"', b'"\\a"']
UNICODE_STRINGS = ["é", "e\u0301", "\U0001d11e", "\u202e", "\ufeff", "ß" * 300, "\U0001f600" * 300, "\u0000",
                   "a\nb", "\x1f", "\u2028", "\uffff", "null", "true", "0", "-1", " ", "  padded  "]


# --------------------------------------------------------------------------------------------
# Generators of odd values

def random_json_value(rng, depth=0):
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(["", "x", "value", rng.choice(UNICODE_STRINGS)])
    if kind == 1:
        return Raw(rng.choice(LIMIT_NUMBER_TOKENS).encode())
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind == 4 and depth < 3:
        return [random_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 5 and depth < 3:
        return Obj((rng.choice(["Key", "Value", "Op", "SyncCount", "x", ""]), random_json_value(rng, depth + 1))
                   for _ in range(rng.randint(0, 3)))
    if kind == 6:
        return Raw(b'"' + rng.choice(INVALID_UTF8) + b'"')
    if kind == 7:
        return Raw(rng.choice(JSON_ESCAPES))
    return rng.randint(-5, 5)


def mutant_json_value(rng, current):
    """A replacement for a JSON value: another type, a limit, a huge or odd string..."""
    choice = rng.randrange(12)
    if choice == 0:   # type swap
        options = ["s", 7, True, None, [], Obj(), [current], Obj([("x", current)])]
        return rng.choice([o for o in options if type(o) is not type(current)] or options)
    if choice == 1:
        return Raw(rng.choice(LIMIT_NUMBER_TOKENS).encode())
    if choice == 2:
        return ""
    if choice == 3:   # a long string: around Cognito's limits (1 KiB keys, 1 MiB values) and past the body limit
        size = rng.choice([1024, 1025, 4097, 65536, 1_048_575, 1_048_576, 3 << 20, 5 << 20])
        return rng.choice(["x", "é", "\U0001f600"]) * (size // 4) if size < 65536 and rng.random() < 0.3 else "x" * size
    if choice == 4:
        return Raw(b'"' + rng.choice([b"", b"a"]) + rng.choice(INVALID_UTF8) + b'"')
    if choice == 5:
        return Raw(rng.choice(JSON_ESCAPES))
    if choice == 6:
        return rng.choice(UNICODE_STRINGS)
    if choice == 7:   # deep nesting
        depth = rng.choice([64, 513, 5000, 100_000])
        return Raw(b"[" * depth + b"]" * depth)
    if choice == 8 and isinstance(current, str):
        return current + rng.choice(["", "x" * 1024, "\u0000", "%00", "/..", "\udcff".encode("utf-8", "surrogateescape").decode("latin-1")])
    if choice == 9:
        return [random_json_value(rng) for _ in range(rng.choice([0, 1, 1025, 10_000]))]
    if choice == 10:
        return Raw(rng.choice([b"NaN", b"Infinity", b"-Infinity", b"01", b"1.", b".5", b"+1", b"0x10", b"1e", b"--1", b"1e+", b"true1"]))
    return random_json_value(rng)


def mutant_segment(rng, old):
    choice = rng.randrange(8)
    if choice <= 2:
        return rng.choice(PATH_SEGMENTS)
    if choice == 3:
        return rng.choice(RAW_PATH_SEGMENTS)
    if choice == 4:
        n = rng.choice([256, 1025, 4097, 16384, 65536])
        return rng.choice(["a" * n, "%41" * (n // 3), "%C3%A9" * (n // 6), old + "x" * n])
    if choice == 5:
        return old + rng.choice(BAD_ESCAPES)
    if choice == 6:
        return rng.choice(BAD_ESCAPES) + old
    return rng.choice(LIMIT_QUERY_NUMBERS) or "0"


def mutant_token(rng, token):
    """A damaged paging or session token: truncated, a character changed, padding and
    alphabet variants, another token's pieces, or garbage."""
    from urllib.parse import unquote
    token = unquote(token)
    choice = rng.randrange(9)
    if choice == 0 and token:
        return token[:rng.randrange(len(token))]
    if choice == 1 and token:
        i = rng.randrange(len(token))
        return token[:i] + rng.choice("A/+=-_.~\x00é") + token[i + 1:]
    if choice == 2:
        return token.rstrip("=") + rng.choice(["", "=", "==", "==="])
    if choice == 3:
        return token.replace("+", "-").replace("/", "_")
    if choice == 4:
        return token + token
    if choice == 5:
        return base64.b64encode(rng.choice([b"", b"\x00" * 8, b"\xff" * 64, b"{}", b'{"a":1}', bytes(range(256))])).decode()
    if choice == 6:
        return rng.choice(["", "=", "null", "0", "-1", "18446744073709551615", "a" * 4096, "%FF"])
    if choice == 7 and "." in token:
        parts = token.split(".")
        parts[rng.randrange(len(parts))] = rng.choice(["", "A", "AAAA", parts[0]])
        return ".".join(parts)
    return base64.b64encode(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))).decode()


def short(value):
    text = repr(value) if not isinstance(value, Raw) else repr(value)
    return text if len(text) <= 80 else text[:60] + f"...({len(text)} chars)"
