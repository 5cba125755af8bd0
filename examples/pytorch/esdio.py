"""Python readers of the runtime's files and its deterministic rules, for
single-process references and checks (numpy only):

  read_stream(path)       a dataset stream (docs/dataset.md, version 1,
                          uncompressed blocks): labels, dense, keys
  row_init(seed, keys, d) esd_row_init bit for bit (splitmix64 counter stream)
  EmbOptim                the embedding optimizers of esd/optim.h (float32
                          arithmetic in the C order: same bits for the same
                          gradient)
  read_ckpt(path)         a PS checkpoint (docs/model.md): header, rows, dense

Checksums are not verified here: validate a file with `esd-ref info` (or
esd_ckpt_open / esd_ds_open) first.
"""
import struct

import numpy as np

KEY_ID_BITS = 48
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2}


def key_make(table, ids):
    return (np.uint64(table) << np.uint64(KEY_ID_BITS)) | np.asarray(ids, np.uint64)


# -- dataset stream --------------------------------------------------------
def read_stream(path, limit=None):
    """(labels float32 [n], dense float32 [n, D], keys uint64 [n, T]) of the
    first limit samples (all by default), in training order."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"ESDDATA\0":
        raise ValueError("%s: not a dataset stream (magic)" % path)
    version, hbytes = struct.unpack_from("<II", buf, 8)
    if version != 1:
        raise ValueError("%s: stream version %d, expected 1" % (path, version))
    T, D, dfmt, _spb, _flags = struct.unpack_from("<5I", buf, 48)
    total, nblocks = struct.unpack_from("<QQ", buf, 72)
    rows = [struct.unpack_from("<Q", buf, 208 + 16 * t)[0] for t in range(T)]
    n = total if limit is None else min(total, limit)
    labels = np.empty(n, np.float32)
    dense = np.empty((n, D), np.float32)
    keys = np.empty((n, T), np.uint64)
    at, got = hbytes, 0
    while got < n:
        magic, bn, first, stored, raw, bflags = struct.unpack_from("<IIQIII", buf, at)
        if magic != 0x4B4C4245 or first != got:
            raise ValueError("%s: bad block at byte %d" % (path, at))
        if bflags & 1:
            raise ValueError("%s: block at byte %d is zstd-compressed (not supported here)"
                             % (path, at))
        p = at + 40
        take = min(bn, n - got)
        labels[got:got + take] = np.frombuffer(buf, np.uint8, bn, p)[:take]
        p += bn
        if dfmt == 0:
            d = np.frombuffer(buf, np.float32, bn * D, p).reshape(bn, D)
            p += 4 * bn * D
        else:
            h = np.frombuffer(buf, np.uint16, bn * D, p).astype(np.uint32) << np.uint32(16)
            d = h.view(np.float32).reshape(bn, D)
            p += 2 * bn * D
        dense[got:got + take] = d[:take]
        for t in range(T):
            w = 4 if rows[t] <= (1 << 32) else 8
            ids = np.frombuffer(buf, np.uint32 if w == 4 else np.uint64, bn, p)
            p += w * bn
            keys[got:got + take, t] = key_make(t, ids[:take].astype(np.uint64))
        got += take
        at += 40 + stored
    return labels, dense, keys


# -- row initialisation (runtime/optim/optim.c) -----------------------------
def _splitmix64(x):
    x = x + GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_init(seed, keys, dim):
    """esd_row_init(seed, key, dim) for every key: float32 [len(keys), dim]."""
    with np.errstate(over="ignore"):
        keys = np.asarray(keys, np.uint64).reshape(-1, 1)
        base = _splitmix64(_splitmix64(np.array([seed], np.uint64)) ^ keys)
        i = np.arange(dim, dtype=np.uint64).reshape(1, -1)
        x = _splitmix64(base + i * GOLDEN)
    u = (x >> np.uint64(40)).astype(np.int64) - (1 << 23)
    unit = u.astype(np.float32) * np.float32(1.0 / 8388608.0)
    scale = np.float32(1.0) / np.sqrt(np.float32(dim))
    return (scale * unit).astype(np.float32)


# -- embedding optimizers (esd/optim.h) -------------------------------------
class EmbOptim:
    """One update of a set of rows with their summed gradients, in float32,
    in the operation order of runtime/optim/optim.c. PyTorch's defaults."""

    def __init__(self, name, lr, eps=None, beta1=0.9, beta2=0.999, initial_accumulator=0.0):
        self.name = name
        self.lr = np.float32(lr)
        if eps is None:
            eps = {"sgd": 0.0, "adagrad": 1e-10, "adam": 1e-8}[name]
        self.eps = np.float32(eps)
        self.b1, self.b2 = np.float32(beta1), np.float32(beta2)
        self.acc0 = np.float32(initial_accumulator)

    def state_floats(self):
        return OPTIMIZERS[self.name]

    def init_state(self, n, dim):
        s = self.state_floats()
        st = np.zeros((n, dim * s), np.float32)
        if self.name == "adagrad":
            st[:] = self.acc0
        return st

    def apply(self, value, state, grad, t):
        """value, state: float32 [r, dim], [r, dim*s] updated in place;
        grad float32 [r, dim]; t int [r]: 1-based update count per row."""
        g = grad.astype(np.float32)
        if self.name == "sgd":
            value -= self.lr * g
        elif self.name == "adagrad":
            a = state + g * g
            state[:] = a
            value[:] = value - self.lr * g / (np.sqrt(a) + self.eps)
        else:
            d = value.shape[1]
            td = np.asarray(t, np.float64).reshape(-1, 1)
            step = (np.float64(self.lr) / (1.0 - np.power(np.float64(self.b1), td))).astype(
                np.float32)
            bc2 = np.sqrt(1.0 - np.power(np.float64(self.b2), td)).astype(np.float32)
            m, v = state[:, :d], state[:, d:]
            mi = self.b1 * m + (np.float32(1) - self.b1) * g
            vi = self.b2 * v + (np.float32(1) - self.b2) * (g * g)
            m[:] = mi
            v[:] = vi
            value[:] = value - step * mi / (np.sqrt(vi) / bc2 + self.eps)


# -- checkpoint (docs/model.md, runtime/ckpt) -------------------------------
def read_ckpt(path):
    """{'seed', 'iter', 'cursor', 'dim', 'opt', 'keys' uint64 [r], 'clocks'
    uint64 [r], 'values' float32 [r, dim], 'state' float32 [r, dim*s],
    'dense', 'dense_state'} of one shard file."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"ESDCKPT\0":
        raise ValueError("%s: not a checkpoint (magic)" % path)
    version, hsize = struct.unpack_from("<II", buf, 8)
    if version != 1:
        raise ValueError("%s: checkpoint version %d, expected 1" % (path, version))
    seed, it, cursor, nrows, ndense, dclock = struct.unpack_from("<6Q", buf, 16)
    dim, opt, sf = struct.unpack_from("<3I", buf, 64)
    rec = 16 + 4 * dim * (1 + sf)
    if len(buf) != hsize + nrows * rec + 4 * ndense * (1 + sf) + 48:
        raise ValueError("%s: size %d does not match its header" % (path, len(buf)))
    dt = np.dtype([("key", "<u8"), ("clock", "<u8"), ("value", "<f4", (dim,)),
                   ("state", "<f4", (dim * sf,))])
    rows = np.frombuffer(buf, dt, nrows, hsize)
    p = hsize + nrows * rec
    dense = np.frombuffer(buf, np.float32, ndense * (1 + sf), p)
    return {"seed": seed, "iter": it, "cursor": cursor, "dim": dim, "opt": opt,
            "dense_clock": dclock, "keys": rows["key"].copy(), "clocks": rows["clock"].copy(),
            "values": rows["value"].copy(), "state": rows["state"].reshape(nrows, dim * sf).copy(),
            "dense": dense[:ndense].copy(), "dense_state": dense[ndense:].copy()}
