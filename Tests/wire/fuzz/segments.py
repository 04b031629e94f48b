"""Segments for the HTTP fuzzer: built byte for byte and parsed here."""

import dataclasses
import hashlib
import struct

# --------------------------------------------------------------------------------------------
# Segments (docs/segment-format.md, docs/storage-format.md): built and parsed here, with the
# entries in zstd raw or RLE blocks (a valid zstd frame needs no compressor).

MAGIC = b"SLSEG01\n"
ZEROS = bytes(32)
U64 = (1 << 64) - 1
SEGMENT_TYPE = "application/vnd.syncledger.segment"


def varint(n):
    """LEB128 of a non-negative integer of any size (over 64 bits gives an overlong varint)."""
    n = max(0, int(n))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n):
    n = int(n)
    return varint(((n << 1) ^ (n >> 63)) & U64)


def lp(data):
    data = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return varint(len(data)) + data


def stream_key(pool, identity, dataset):
    return f"{pool}\0{identity}\0{dataset}".encode()


def chain_hash(previous, key, body):
    return hashlib.sha256(previous + varint(len(key)) + key + body).digest()


@dataclasses.dataclass
class EntrySpec:
    """One log entry: its body fields, its commit sequence and (feed) its stream."""
    offset: int
    time: int
    author: object = "fuzz-device"
    events: list = dataclasses.field(default_factory=list)  # ("put", k, v[, device]) ("remove", k[, device]) ("delete",)
    sequence: int = 1
    key: bytes = b""
    version: object = None      # None: 3, or 4 when the entry names a device (1-2: values inline, format 2)
    device: object = None       # body version 2/4: the device after the author
    event_count: object = None  # overrides len(events)
    trailing: bytes = b""
    body_override: object = None
    seed: bytes = b"fuzz-entry-seed!"  # the 16-byte seed of a version 3-4 body's salts

    def _version(self):
        return self.version if self.version is not None else (3 if self.device is None else 4)

    def body(self):
        return self._encode()[0]

    def canonical(self):
        """What the chain hashes: a version 3-4 body with each value replaced by its salted
        commitment, SHA-256(salt || value), and without the salting and seed (docs/storage-format.md)."""
        return self._encode()[1]

    def _encode(self):
        if self.body_override is not None:
            return self.body_override, self.body_override
        version = self._version()
        committed = version in (3, 4)
        head = bytearray([version & 0xFF])
        head += varint(self.offset) + zigzag(self.time) + lp(self.author)
        if self.device is not None:
            head += lp(self.device)
        out, canon = bytearray(head), bytearray(head)
        if committed:
            out += b"\x00" + self.seed[:16].ljust(16, b"\0")
        count = varint(len(self.events) if self.event_count is None else self.event_count)
        out += count
        canon += count
        puts = 0
        for e in self.events:
            kind = e[0]
            if kind == "put":
                device = e[3] if len(e) > 3 else None
                value = e[2].encode("utf-8", "surrogatepass") if isinstance(e[2], str) else e[2]
                tail = zigzag(device) if device is not None else b""
                if committed:
                    k = bytes([6 if device is None else 7])
                    salt = hashlib.sha256(self.seed[:16].ljust(16, b"\0") + varint(puts)).digest()[:16]
                    out += k + lp(e[1]) + lp(value) + tail
                    canon += k + lp(e[1]) + hashlib.sha256(salt + value).digest() + tail
                    puts += 1
                else:
                    piece = bytes([1 if device is None else 4]) + lp(e[1]) + lp(value) + tail
                    out += piece
                    canon += piece
            elif kind == "remove":
                device = e[2] if len(e) > 2 else None
                piece = bytes([2 if device is None else 5]) + lp(e[1]) + (zigzag(device) if device is not None else b"")
                out += piece
                canon += piece
            elif kind == "delete":
                out += b"\x03"
                canon += b"\x03"
            else:  # ("raw", kind byte, bytes)
                piece = bytes([e[1] & 0xFF]) + e[2]
                out += piece
                canon += piece
        if not committed:
            canon = out
        return bytes(out) + self.trailing, bytes(canon) + self.trailing


def zstd_raw_frame(data, declared=None, checksum=False):
    """One zstd frame holding `data` in raw blocks, declaring `declared` bytes of content."""
    size = len(data) if declared is None else declared
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out.append(0xE0 | (4 if checksum else 0))  # 8-byte content size, single segment
    out += struct.pack("<Q", size & U64)
    pieces = [data[i:i + 131072] for i in range(0, len(data), 131072)] or [b""]
    for i, piece in enumerate(pieces):
        header = (1 if i == len(pieces) - 1 else 0) | (0 << 1) | (len(piece) << 3)
        out += struct.pack("<I", header)[:3] + piece
    if checksum:
        out += b"\0\0\0\0"  # a wrong XXH64 checksum
    return bytes(out)


def zstd_rle_frame(size, byte=0x41, declared=None):
    """A small frame that decompresses to `size` copies of `byte` (a decompression bomb)."""
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out.append(0xE0)
    out += struct.pack("<Q", (size if declared is None else declared) & U64)
    left = size
    while True:
        piece = min(left, 131072)
        left -= piece
        out += struct.pack("<I", (1 if left == 0 else 0) | (1 << 1) | (piece << 3))[:3] + bytes([byte])
        if left == 0:
            return bytes(out)


def zstd_no_size_frame(data):
    """A frame that does not declare its content size (window descriptor instead)."""
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out.append(0x00)       # no content size, not single segment, no checksum
    out.append(0x88)       # window 2^(10+17) = 128 MiB... the decoder must not trust it
    pieces = [data[i:i + 131072] for i in range(0, len(data), 131072)] or [b""]
    for i, piece in enumerate(pieces):
        out += struct.pack("<I", (1 if i == len(pieces) - 1 else 0) | (len(piece) << 3))[:3] + piece
    return bytes(out)


def seal(body):
    return body + hashlib.sha256(body).digest()


@dataclasses.dataclass
class Header:
    """A version-2 segment header and the parts around it."""
    version: int = 2
    scope: int = 1
    level: int = 3
    flags: int = 0
    dict_id: int = 0
    first_offset: int = 0
    last_offset: int = 0
    first_sequence: int = 0
    last_sequence: int = 0
    count: int = 0
    plain_size: int = 0
    compressed_size: object = None  # None: the frame's length
    name_length: object = None      # None: the name's length
    name: bytes = b""
    previous: object = None         # None: not written (flag 1)
    last: bytes = ZEROS
    frame: bytes = b""
    trailing: bytes = b""

    FIELDS = ("dict_id", "first_offset", "last_offset", "first_sequence", "last_sequence", "count",
              "plain_size", "compressed_size", "name_length")

    def encode(self, reseal=True, checksum=None):
        out = bytearray(MAGIC)
        out += struct.pack(">H", self.version & 0xFFFF)
        out += bytes([self.scope & 0xFF, self.level & 0xFF, self.flags & 0xFF])
        for name in self.FIELDS:
            value = getattr(self, name)
            if value is None:
                value = len(self.frame) if name == "compressed_size" else len(self.name)
            out += varint(value)
        out += self.name
        if self.previous is not None:
            out += self.previous
        out += self.last + self.frame + self.trailing
        if checksum is not None:
            return bytes(out) + checksum
        return seal(bytes(out)) if reseal else bytes(out) + bytes(32)

    @classmethod
    def parse(cls, data):
        """Parses a version-2 segment (None if it is not one)."""
        try:
            if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 5 + 64:
                return None
            p = len(MAGIC)
            version = struct.unpack(">H", data[p:p + 2])[0]
            if version != 2:
                return None
            h = cls(version=version, scope=data[p + 2], level=data[p + 3], flags=data[p + 4])
            p += 5

            def read_varint():
                nonlocal p
                value, shift = 0, 0
                while True:
                    b = data[p]
                    p += 1
                    value |= (b & 0x7F) << shift
                    if not b & 0x80:
                        return value
                    shift += 7

            for name in cls.FIELDS:
                setattr(h, name, read_varint())
            h.name = data[p:p + h.name_length]
            p += h.name_length
            if not h.flags & 1:
                h.previous = data[p:p + 32]
                p += 32
            h.last = data[p:p + 32]
            p += 32
            h.frame = data[p:len(data) - 32]
            h.compressed_size = h.name_length = None
            return h
        except (IndexError, struct.error):
            return None


def build_segment(entries, scope, key=b"", previous=None, header_overrides=None, frame=None):
    """A segment of `entries` (EntrySpec) with consistent hashes and header. `previous`: the
    hash before a stream segment's first entry (None: genesis). Feed entries carry their
    stream in `.key` and the previous hash of each stream's first entry in `previous`
    (a dict key -> hash)."""
    plain = bytearray()
    if scope == 1:
        h = previous or ZEROS
        for e in entries:
            body = e.body()
            plain += varint(e.sequence) + varint(len(body)) + body
            h = chain_hash(h, key, e.canonical())
        last = h
    else:
        heads = dict(previous or {})
        firsts, lasts = {}, {}
        for i, e in enumerate(entries):
            firsts.setdefault(e.key, i)
            lasts[e.key] = i
        last = ZEROS
        for i, e in enumerate(entries):
            body = e.body()
            prev = heads.get(e.key, ZEROS)
            h = chain_hash(prev, e.key, e.canonical())
            flags = (1 if firsts[e.key] == i else 0) | (2 if lasts[e.key] == i else 0)
            plain += varint(len(e.key)) + e.key + bytes([flags])
            if flags & 1:
                plain += prev
            if flags & 2:
                plain += h
            plain += varint(e.sequence) + varint(len(body)) + body
            heads[e.key] = h
            last = h
    genesis = scope != 1 or previous is None or previous == ZEROS
    header = Header(scope=scope, flags=1 if genesis else 0, name=key if scope == 1 else b"",
                    previous=None if genesis else previous, last=last,
                    first_offset=entries[0].offset if entries else 0,
                    last_offset=entries[-1].offset if entries else 0,
                    first_sequence=entries[0].sequence if entries else 0,
                    last_sequence=entries[-1].sequence if entries else 0,
                    count=len(entries), plain_size=len(plain))
    header.frame = zstd_raw_frame(bytes(plain)) if frame is None else frame(bytes(plain))
    for name, value in (header_overrides or {}).items():
        setattr(header, name, value)
    return header, bytes(plain)


def render_segment(spec, header_overrides=None, frame=None, reseal=True):
    kind, data = spec
    if kind == "real":
        raise ValueError("a real segment is bytes already")
    if kind == "stream":
        prev = data["previous"]
        header, _ = build_segment(data["entries"], 1, data["key"], None if prev == ZEROS else prev,
                                  header_overrides, frame)
    else:
        header, _ = build_segment(data["entries"], 2, previous=data["previous"], header_overrides=header_overrides, frame=frame)
    return header.encode(reseal=reseal)
