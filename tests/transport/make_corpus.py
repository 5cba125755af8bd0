#!/usr/bin/env python3
"""Writes the seed corpus of the frame decoder's fuzz target (corpus/):
one well-formed frame of every op and a set of malformed ones (lengths 0,
max, max+1, 2^32-1, counts that overflow, wrong version, unknown op).
Run from this folder: ./make_corpus.py"""
import os
import struct

MAGIC = 0x46445345
VERSION = 3  # ESD_PROTO_VERSION: a seed of another version stops at the header
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(out, exist_ok=True)


def frame(op, body, version=VERSION, flags=0, length=None, seq=0):
    if length is None:
        length = len(body)
    return struct.pack("<IBBHIIQ", MAGIC, version, op, flags, length, 0, seq) + body


def rows(op, kind, count, dim, sdim, it=1, seq=0, worker=0):
    b = struct.pack("<QQIIIIII", it, seq, worker, kind, count, dim, sdim, 0)
    for i in range(count):
        b += struct.pack("<QQ", i, i) + struct.pack("<%df" % (dim + sdim), *range(dim + sdim))
    return frame(op, b)


def table_rows(op, kind, keys, dim, sdim, dims=(1, 4, 128)):
    """A row op flagged TABLE_DIMS: each row its table's dim (fuzz_frame.c's
    model.dims), the state sdim / dim floats per value float."""
    b = struct.pack("<QQIIIIII", 1, 0, 0, kind, len(keys), dim, sdim, 1)
    for i, (t, k) in enumerate(keys):
        d = dims[t] if t < len(dims) else dim
        n = d + d * sdim // dim
        b += struct.pack("<QQ", (t << 48) | k, i) + struct.pack("<%df" % n, *range(n))
    return frame(op, b)


seeds = {
    "hello": frame(1, struct.pack("<IIQIIIIQ", VERSION, 3, 42, 0, 16, 16, 4, 0)),
    "pull": frame(2, struct.pack("<QQIIII", 1, 1, 0, 3, 0, 0) + struct.pack("<3Q", 1, 2, 3)),
    "pull_resp": rows(3, 0, 2, 4, 0),
    "push_value": rows(4, 1, 2, 4, 4),
    "push_value_evict": rows(4, 2, 1, 8, 8),
    "push_grad": rows(5, 1, 3, 4, 0),
    "push_value_table_dims": table_rows(4, 1, [(0, 1), (1, 2), (2, 3)], 128, 128),
    "pull_resp_table_dims": table_rows(3, 0, [(1, 5), (0xffff, 0)], 128, 0),
    "barrier": frame(6, struct.pack("<QQII", 1, 0xabc, 0, 4)),
    "ack": frame(7, struct.pack("<QQIi", 1, 2, 5, 0)),
    "error": frame(8, struct.pack("<iI", -71, 5) + b"oops\x21\0\0\0"),
    "stats_req": frame(9, struct.pack("<II", 0, 0)),
    "stats": frame(9, struct.pack("<II", 1, 0) + struct.pack("<IIQQQQ", 1, 0, 1, 2, 3, 4)),
    "setting": frame(10, struct.pack("<QHH", 40, 15, 3) + b"dispatch.methodopt\0\0"),
    "ack_setting": frame(7, struct.pack("<QQIi", 1, 0, 6, 0), flags=0x10),
    "bad_setting_nul": frame(10, struct.pack("<QHH", 40, 2, 2) + b"a\0cd"),
    "link_ack": frame(32, struct.pack("<Q", 9)),
    "link_bye": frame(33, struct.pack("<I", 1)),
    "bad_len0_pull": frame(2, b""),
    "bad_len_max": frame(2, b"\0" * 24, length=1 << 16),
    "bad_len_max_plus1": frame(2, b"", length=(1 << 16) + 1),
    "bad_len_u32max": frame(5, b"", length=0xFFFFFFFF),
    "bad_count_overflow": frame(5, struct.pack("<QQIIIIII", 1, 0, 0, 1, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0)),
    "bad_pull_count": frame(2, struct.pack("<QQIIII", 1, 1, 0, 0x20000000, 0, 0)),
    "bad_version": frame(6, struct.pack("<QQII", 1, 0, 0, 0), version=9),
    "bad_op": frame(77, b""),
    "bad_flags": frame(6, struct.pack("<QQII", 1, 0, 0, 0), flags=0x8000),
    "bad_error_text": frame(8, struct.pack("<iI", -1, 4096)),
    "truncated": frame(2, struct.pack("<QQIIII", 1, 1, 0, 3, 0, 0) + b"\1\2"),
    "short": b"ESDF\x01",
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), out))
