#!/usr/bin/env python3
"""Writes the seed corpus of the checkpoint fuzz target (corpus_ckpt/):
crafted variants of the valid_* files (made with esd-ref --iters 2
--batch 4 --tables 2 --rows 3 --dim 2 --hidden 2 --dense 1 --opt NAME),
with checksums recomputed so each reaches a later check of the reader.
Usage: make_ckpt_corpus.py [DIR]"""
import os
import struct
import sys

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def rnd(acc, v):
    return (rotl((acc + v * P2) & M, 31) * P1) & M


def merge(acc, v):
    return ((acc ^ rnd(0, v)) * P1 + P4) & M


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = rnd(v[j], struct.unpack_from('<Q', data, i + 8 * j)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for x in v:
            h = merge(h, x)
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h ^= rnd(0, struct.unpack_from('<Q', data, i)[0])
        h = (rotl(h, 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from('<I', data, i)[0] * P1) & M
        h = (rotl(h, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M
        h = (rotl(h, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


def reseal(b):
    """Recompute header, body and trailer checksums of bytearray b."""
    struct.pack_into('<Q', b, 120, xxh64(bytes(b[:120])))
    t = len(b) - 48
    struct.pack_into('<Q', b, t + 24, xxh64(bytes(b[128:t])))
    struct.pack_into('<Q', b, t + 32, struct.unpack_from('<Q', b, 120)[0])
    struct.pack_into('<Q', b, t + 40, xxh64(bytes(b[t:t + 40])))
    return b


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus_ckpt')
    base = bytearray(open(os.path.join(d, 'valid_adam'), 'rb').read())
    assert reseal(bytearray(base)) == base, 'xxh64 or layout mismatch'
    out = {}
    out['trunc_header'] = base[:100]
    out['trunc_body'] = base[:len(base) - 60]
    out['trailing_byte'] = base + b'\0'
    out['bad_version'] = reseal(bytearray(base)); struct.pack_into('<I', out['bad_version'], 8, 2)
    reseal(out['bad_version'])
    for name, off, fmt, val in [('dim_zero', 64, '<I', 0), ('dim_huge', 64, '<I', 1 << 30),
                                ('opt_unknown', 68, '<I', 7), ('sf_mismatch', 72, '<I', 1),
                                ('nshards_zero', 80, '<I', 0), ('flags_unknown', 84, '<I', 6),
                                ('rows_huge', 40, '<Q', 1 << 62), ('dense_huge', 48, '<Q', M),
                                ('reserved_set', 100, '<I', 1)]:
        b = bytearray(base)
        struct.pack_into(fmt, b, off, val)
        out[name] = reseal(b)
    # counts changed consistently in the header only: the size no longer matches
    b = bytearray(base)
    rows = struct.unpack_from('<Q', b, 40)[0]
    rec = 16 + 4 * 2 * 3
    struct.pack_into('<Q', b, 40, rows - 1)
    struct.pack_into('<Q', b, 48, struct.unpack_from('<Q', b, 48)[0] + rec // 12)
    out['counts_changed'] = reseal(b)
    # trailer row count disagrees
    b = bytearray(base)
    struct.pack_into('<Q', b, len(b) - 40, rows + 1)
    out['trailer_rows'] = reseal(b)
    # marked sorted, first two rows swapped
    b = bytearray(base)
    r0, r1 = bytes(b[128:128 + rec]), bytes(b[128 + rec:128 + 2 * rec])
    b[128:128 + rec], b[128 + rec:128 + 2 * rec] = r1, r0
    out['unsorted_flagged'] = reseal(b)
    out['empty'] = b''
    for name, data in out.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(bytes(data))


main()
