"""Mutations of segment bodies for the HTTP fuzzer: built entries (hashes and header follow),
header fields at their limits, unknown versions and scopes, lying zstd frames, bytes."""

import struct
import time

from conftest import ADMIN_KEY

from .segments import U64, ZEROS, Header, build_segment, seal, zstd_no_size_frame, zstd_raw_frame, zstd_rle_frame
from .values import short

LIMIT_U64 = [0, 1, 2, 255, 256, 1024, 1025, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64 - 2, U64,
             256 << 20, (256 << 20) + 1, 64 << 20]
LIMIT_I64 = [0, -1, 1, 2**53, -(2**53), 2**62, 2**63 - 1, -(2**63), 253402300800000, -62135596800000,
             int(time.time() * 1000) - 10 * 365 * 86400 * 1000, int(time.time() * 1000) + 100 * 365 * 86400 * 1000]


def mutate_entries(spec, rng, notes):
    """Changes one field of the built entries; hashes and header follow."""
    kind, data = spec
    entries = data["entries"]
    e = rng.choice(entries)
    i = entries.index(e)
    choice = rng.randrange(14)
    if choice == 0:
        e.time = rng.choice(LIMIT_I64)
        notes.append(f"entry[{i}].time={e.time}")
    elif choice == 1:
        e.offset = rng.choice([0, e.offset - 1, e.offset + 1, e.offset + 2] + LIMIT_U64)
        notes.append(f"entry[{i}].offset={e.offset}")
    elif choice == 2:
        if rng.random() < 0.5:
            e.device = rng.choice(["phone", "", "d" * 257, b"\xff", "\u0000", "é" * 200])
            notes.append(f"entry[{i}] body version 4, device={short(e.device)}")
        else:
            e.version = rng.choice([0, 1, 2, 4, 5, 255])
            notes.append(f"entry[{i}].version={e.version}")
    elif choice == 3:
        e.author = rng.choice(["", "x" * 100_000, b"\xff\xfe", "_syncledger:0", "\u0000", "admin:" + ADMIN_KEY, "é" * 1000])
        notes.append(f"entry[{i}].author={short(e.author)}")
    elif choice == 4:
        e.event_count = rng.choice([0, len(e.events) + 1, 2**32, U64, 2**64 + 5])
        notes.append(f"entry[{i}].event count={e.event_count}")
    elif choice == 5:
        e.events.append(("raw", rng.choice([0, 6, 7, 255, 3, 4, 5]), bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 12)))))
        notes.append(f"entry[{i}] raw event kind {e.events[-1][1]}")
    elif choice == 6:
        key = rng.choice(["", "k" * 1024, "k" * 1025, "k" * 100_000, b"\xff", b"\xed\xa0\x80", "\u0000", "é" * 513])
        e.events = [("put", key, "v")]
        notes.append(f"entry[{i}] put key={short(key)}")
    elif choice == 7:
        value = rng.choice(["", "x" * 1_048_576, "x" * (1 << 20), b"\xc0\x80", "é" * 600_000])
        e.events = [("put", "k0", value)]
        notes.append(f"entry[{i}] put value={short(value)}")
    elif choice == 8:
        e.events = [("put", "k0", "v", rng.choice(LIMIT_I64)), ("remove", "k1", rng.choice(LIMIT_I64))]
        notes.append(f"entry[{i}] device times at limits")
    elif choice == 9:
        e.events = [("put", f"bulk{j}", "v") for j in range(rng.choice([1025, 3000]))]
        notes.append(f"entry[{i}] {len(e.events)} puts")
    elif choice == 10:
        e.events = [("delete",)] + rng.choice([[], [("put", "k0", "after-delete")], [("delete",)]])
        notes.append(f"entry[{i}] delete dataset events")
    elif choice == 11:
        e.sequence = rng.choice([0, U64, 2**63, e.sequence - 1])
        notes.append(f"entry[{i}].sequence={e.sequence}")
    elif choice == 12:
        e.trailing = rng.choice([b"\x00", b"x" * 10, b"\x80"])
        notes.append(f"entry[{i}] trailing body bytes")
    else:
        e.events = []
        notes.append(f"entry[{i}] no events")


def mutate_segment(request, rng):
    """Mutations of a segment body: built entries, header fields, frames, bytes."""
    spec = getattr(request, "segment", None)
    notes = request.notes
    header = None
    if spec is not None and spec[0] != "real":
        entries_changed = rng.random() < 0.5
        if entries_changed:
            mutate_entries(spec, rng, notes)
        kind, data = spec
        if kind == "stream":
            prev = data["previous"]
            header, plain = build_segment(data["entries"], 1, data["key"], None if prev == ZEROS else prev)
        else:
            header, plain = build_segment(data["entries"], 2, previous=data["previous"])
        if entries_changed and rng.random() < 0.7:
            # Hashes, sizes and checksum consistent: the changed entry reaches the merge.
            request.body = header.encode()
            return
    else:
        header = Header.parse(request.body)
        plain = None
    choice = rng.randrange(12)
    reseal = rng.random() < 0.8
    if header is None or choice <= 1:
        body = header.encode() if header is not None else request.body
        if choice == 0 or header is None:
            n = rng.randrange(len(body)) if body else 0
            body = body[:n]
            if reseal and n > 32:
                body = seal(body[:-32])
            notes.append(f"segment truncated to {n} bytes" + (" (resealed)" if reseal else ""))
        else:
            b = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
            body = seal(bytes(b[:-32])) if reseal else bytes(b)
            notes.append("segment bits flipped" + (" (resealed)" if reseal else ""))
        request.body = body
        return
    if choice == 2:
        name = rng.choice(Header.FIELDS)
        value = rng.choice(LIMIT_U64 + [(getattr(header, name) or 0) + 1])
        setattr(header, name, value)
        notes.append(f"segment header {name}={value}")
    elif choice == 3:
        header.version = rng.choice([0, 1, 3, 255, 256, 65535])
        notes.append(f"segment version {header.version}")
    elif choice == 4:
        header.scope = rng.choice([0, 2 if header.scope == 1 else 1, 3, 255])
        notes.append(f"segment scope {header.scope}")
    elif choice == 5:
        header.flags = rng.choice([0, 1, 2, 3, 0x80, 0xFF])
        notes.append(f"segment flags {header.flags}")
    elif choice == 6:
        header.dict_id = rng.choice([1, 2, 12345, 2**32 - 1, 2**32, U64])
        notes.append(f"segment dictionary id {header.dict_id}")
    elif choice == 7:
        other = rng.choice([b"", b"a\0b", b"\0\0", b"x" * 1024, b"x" * 1025, b"p\xff\0i\0d",
                            header.name.replace(b"notes", b"..") if header.name else b"..",
                            b"us-east-1:0\0_syncledger:0\0devices"])
        header.name = other
        notes.append(f"segment stream name {other[:40]!r}")
    elif choice == 8:   # decompression bomb: a tiny RLE frame of many bytes, header to match
        size = rng.choice([1 << 20, 16 << 20, 64 << 20, 256 << 20])
        header.frame = zstd_rle_frame(size)
        header.plain_size = size
        header.count = rng.choice([1, size // 2, header.count])
        notes.append(f"segment zstd RLE frame of {size} bytes ({len(header.frame)} compressed)")
    elif choice == 9:   # a frame that lies about its content size
        content = plain if plain is not None else b"\x01\x05hello"
        declared = rng.choice([0, len(content) + 1, 1 << 30, 2**40, 2**63, U64])
        header.frame = rng.choice([zstd_raw_frame(content, declared=declared), zstd_no_size_frame(content)])
        header.plain_size = rng.choice([len(content), declared if declared < 2**63 else len(content)])
        notes.append(f"segment zstd frame declaring {declared} bytes, holding {len(content)}")
    elif choice == 10:  # other frames: garbage entries, two frames, a skippable frame, a bad block
        garbage = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 7, 64, 1000])))
        variant = rng.randrange(4)
        if variant == 0:
            header.frame = zstd_raw_frame(garbage)
            header.plain_size = len(garbage)
            notes.append(f"segment frame of {len(garbage)} random entry bytes")
        elif variant == 1 and plain is not None:
            header.frame = zstd_raw_frame(plain) + zstd_raw_frame(plain)
            header.plain_size = 2 * len(plain)
            notes.append("segment two frames")
        elif variant == 2:
            header.frame = struct.pack("<II", 0x184D2A50, 4) + b"skip" + header.frame
            notes.append("segment skippable frame first")
        else:
            f = bytearray(header.frame)
            if len(f) > 14:
                f[13] = (f[13] & ~0x06) | (rng.choice([2, 3]) << 1)  # block type compressed/reserved
            header.frame = bytes(f)
            notes.append("segment block type changed")
    else:
        header.trailing = rng.choice([b"\x00", b"x" * 100])
        notes.append("segment trailing bytes after the frame")
    request.body = header.encode(reseal=reseal)
    if not reseal:
        notes.append("(checksum not resealed)")
