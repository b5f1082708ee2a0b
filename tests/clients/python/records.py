"""Deterministic test records shared by the Python client programs.

The same generator is written in Java (tests/clients/java/Records.java): record i of a run has
a key, a value, headers and a timestamp computed from i alone, so a reader (also after a broker
restart) knows exactly which bytes it must get back.

    blob      65 536 bytes from xorshift64 seeded with 0x9E3779B97F4A7C15 (low byte of each step)
    key       None if i % 97 == 0, else b"key-%d-" + blob[i % 1000 : i % 1000 + 8]
    value     None if i % 101 == 0 (tombstone), b"" if i % 89 == 0,
              else blob[(i * 131) % 60000 :][: (i * 37) % 700 + 1]
    headers   none if i % 5 == 0; else [("idx", b"%d" % i), ("bin", blob[i % 777 :][: i % 16])],
              plus ("idx", b"dup") and ("nul", None) if i % 7 == 0   (repeated key, null value)
    timestamp base_ts + i  (CreateTime; base_ts is chosen at produce time, normally "now" in ms:
              brokers apply time-based retention to record timestamps, so fixed old ones get deleted)
    partition i % partitions
"""

import json
import sys

base_ts = None  # set by the programs (--base-ts); see timestamp()
MASK = (1 << 64) - 1


def _blob():
    x = 0x9E3779B97F4A7C15
    out = bytearray(65536)
    for n in range(65536):
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        out[n] = x & 0xFF
    return bytes(out)


BLOB = _blob()


def key(i):
    if i % 97 == 0:
        return None
    o = i % 1000
    return b"key-%d-" % i + BLOB[o:o + 8]


def value(i):
    if i % 101 == 0:
        return None
    if i % 89 == 0:
        return b""
    o = (i * 131) % 60000
    return BLOB[o:o + (i * 37) % 700 + 1]


def headers(i):
    if i % 5 == 0:
        return []
    h = [("idx", b"%d" % i), ("bin", BLOB[i % 777:i % 777 + i % 16])]
    if i % 7 == 0:
        h += [("idx", b"dup"), ("nul", None)]
    return h


def now_ms():
    import time
    return int(time.time() * 1000)


def timestamp(i):
    return base_ts + i


def result(obj):
    """The one line the Rust harness parses."""
    print("RESULT " + json.dumps(obj, sort_keys=True), flush=True)


def log(*a):
    print(*a, file=sys.stderr, flush=True)
