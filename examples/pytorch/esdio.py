"""Python readers of the runtime's files and its deterministic rules, for
single-process references and checks (numpy only):

  read_stream(path)       a dataset stream (docs/dataset.md, version 1,
                          uncompressed blocks): labels, dense, keys
  read_bags(path)         any stream, bags included (version 2): labels,
                          dense, keys bag by bag, bag offsets, tables
                          (weights=True: and each key's weight)
  pool(rows, off, T, how) bags of rows pooled (sum or mean; weights=: weighted
                          bags) as the runtime's trainers pool them
  row_init(seed, keys, d) esd_row_init bit for bit (splitmix64 counter stream)
  EmbOptim                the embedding optimizers of esd/optim.h (float32
                          arithmetic in the C order: same bits for the same
                          gradient)
  read_ckpt(path)         a PS checkpoint (docs/model.md): header, rows, dense

Checksums are not verified here: validate a file with `esd-ref info` (or
esd_ckpt_open / esd_ds_open) first.
"""
import os
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
    first limit samples (all by default), in training order; a stream
    with bags is refused (read_bags reads it)."""
    labels, dense, keys, off, T = read_bags(path, limit)
    if len(keys) != len(labels) * T:
        raise ValueError("%s: the stream has bags (multi-hot): read it with read_bags" % path)
    return labels, dense, keys.reshape(len(labels), T)


def _header(buf, path):
    if buf[:8] != b"ESDDATA\0":
        raise ValueError("%s: not a dataset stream (magic)" % path)
    version, hbytes = struct.unpack_from("<II", buf, 8)
    if version not in (1, 2):
        raise ValueError("%s: stream version %d, expected 1 or 2" % (path, version))
    T, D, dfmt, _spb, _flags = struct.unpack_from("<5I", buf, 48)
    total, _nblocks = struct.unpack_from("<QQ", buf, 72)
    rows = [struct.unpack_from("<Q", buf, 208 + 16 * t)[0] for t in range(T)]
    max_bag = [struct.unpack_from("<I", buf, 208 + 16 * T + 4 * t)[0] if version == 2 else 1
               for t in range(T)]
    return hbytes, T, D, dfmt, total, rows, max_bag


def _weighted(buf):
    """Whether the stream's IDs carry weights (header flag bit 2)."""
    return bool(struct.unpack_from("<I", buf, 64)[0] & 4)


def _block(buf, p, bn, T, D, dfmt, rows, max_bag, weighted):
    """One raw payload: labels [bn], dense [bn, D], per table its bag
    lengths [bn], IDs and (a weighted stream, flag bit 2) their weights."""
    labels = np.frombuffer(buf, np.uint8, bn, p).astype(np.float32)
    p += bn
    if dfmt == 0:
        d = np.frombuffer(buf, np.float32, bn * D, p).reshape(bn, D)
        p += 4 * bn * D
    else:
        h = np.frombuffer(buf, np.uint16, bn * D, p).astype(np.uint32) << np.uint32(16)
        d = h.view(np.float32).reshape(bn, D)
        p += 2 * bn * D
    lens, ids, wts = [], [], []
    for t in range(T):
        ln = np.ones(bn, np.int64)
        if max_bag[t] > 1:
            lw = np.uint8 if max_bag[t] < 256 else np.uint16
            ln = np.frombuffer(buf, lw, bn, p).astype(np.int64)
            p += np.dtype(lw).itemsize * bn
        w = np.uint32 if rows[t] <= (1 << 32) else np.uint64
        n = int(ln.sum())
        ids.append(key_make(t, np.frombuffer(buf, w, n, p).astype(np.uint64)))
        p += np.dtype(w).itemsize * n
        wts.append(np.frombuffer(buf, np.float32, n, p) if weighted else np.ones(n, np.float32))
        p += 4 * n if weighted else 0
        lens.append(ln)
    return labels, d, lens, ids, wts


def _sample_major(lens, ids, bn, T, wts=None):
    """Keys of one block sample by sample, table by table, and the bags'
    lengths [bn * T] in that order (with wts: and the keys' weights)."""
    L = np.stack(lens, axis=1)  # [bn, T]
    start = np.concatenate([[0], np.cumsum(L.reshape(-1))])[:-1].reshape(bn, T)
    keys = np.empty(int(L.sum()), np.uint64)
    w = np.empty(int(L.sum()), np.float32)
    for t in range(T):
        ln = lens[t]
        first = np.concatenate([[0], np.cumsum(ln)])[:-1]
        within = np.arange(int(ln.sum())) - np.repeat(first, ln)
        keys[np.repeat(start[:, t], ln) + within] = ids[t]
        if wts is not None:
            w[np.repeat(start[:, t], ln) + within] = wts[t]
    return (keys, L.reshape(-1)) if wts is None else (keys, L.reshape(-1), w)


def read_bags(path, limit=None, weights=False):
    """(labels float32 [n], dense float32 [n, D], keys uint64 [nkeys], bag
    offsets int64 [n * T + 1], T) of the first limit samples (all by
    default): bag (i, t) is keys[off[i*T + t]:off[i*T + t + 1]]; a stream
    without bags has one key per bag. weights=True: and a sixth member,
    each key's weight float32 [nkeys] (1 on an unweighted stream)."""
    with open(path, "rb") as f:
        buf = f.read()
    hbytes, T, D, dfmt, total, rows, max_bag = _header(buf, path)
    weighted = _weighted(buf)
    n = total if limit is None else min(total, limit)
    labels, dense, keys, lens, wout = [], [], [], [], []
    at, got = hbytes, 0
    while got < n:
        magic, bn, first, stored, raw, bflags = struct.unpack_from("<IIQIII", buf, at)
        if magic != 0x4B4C4245 or first != got:
            raise ValueError("%s: bad block at byte %d" % (path, at))
        if bflags & 1:
            raise ValueError("%s: block at byte %d is zstd-compressed (not supported here)"
                             % (path, at))
        lab, d, ln, ids, wts = _block(buf, at + 40, bn, T, D, dfmt, rows, max_bag, weighted)
        k, L, w = _sample_major(ln, ids, bn, T, wts)
        take = min(bn, n - got)
        labels.append(lab[:take])
        dense.append(d[:take])
        keys.append(k[:int(L[:take * T].sum())])
        wout.append(w[:int(L[:take * T].sum())])
        lens.append(L[:take * T])
        got += take
        at += 40 + stored
    off = np.concatenate([[0], np.cumsum(np.concatenate(lens) if lens else [])]).astype(np.int64)
    out = (np.concatenate(labels) if labels else np.empty(0, np.float32),
           np.concatenate(dense) if dense else np.empty((0, D), np.float32),
           np.concatenate(keys) if keys else np.empty(0, np.uint64), off, T)
    if weights:
        out += (np.concatenate(wout) if wout else np.empty(0, np.float32),)
    return out


def pooling_modes(spec, T):
    """A pooling argument: "sum", "mean", or "MODE,MODE,..." one per table
    (then a list)."""
    modes = spec.split(",")
    if len(modes) == 1:
        return modes[0]
    if len(modes) != T or any(m not in ("sum", "mean") for m in modes):
        raise ValueError("pooling %r: sum, mean, or one of them per table (%d)" % (spec, T))
    return modes


def pool(rows, off, T, how="sum", weights=None):
    """[n, T, dim] float32 of rows [nkeys, dim] pooled bag by bag (off as
    read_bags gives it, from 0): the sum in bag order, or the mean (an
    empty bag: zeros), or a list of the two, one per table: the arithmetic
    of the trainers' embedding_bag. weights (a weighted stream's, one a
    key): sum(w * row), a mean bag's divided by sum(w) (1 where 0), as
    esd.torch pools them."""
    import torch
    from torch.nn import functional as F
    r = torch.as_tensor(rows)
    o = torch.as_tensor(np.asarray(off[:-1], np.int64))
    if weights is not None:
        w = torch.as_tensor(np.asarray(weights, np.float32))
        out = F.embedding_bag(torch.arange(r.shape[0]), r, o, mode="sum", per_sample_weights=w)
        if how != "sum":
            lens = torch.as_tensor(np.diff(np.asarray(off, np.int64)))
            bag = torch.repeat_interleave(torch.arange(len(lens)), lens)
            sw = torch.zeros(len(lens)).index_add_(0, bag, w)
            sw = torch.where(sw == 0, torch.ones_like(sw), sw)
            if not isinstance(how, str):
                mean = torch.tensor([m == "mean" for m in how]).repeat(len(lens) // T)
                sw = torch.where(mean, sw, torch.ones_like(sw))
            out = out / sw.unsqueeze(1)
        return out.view(-1, T, r.shape[1])
    if isinstance(how, str):
        out = F.embedding_bag(torch.arange(r.shape[0]), r, o, mode=how)
    else:  # as esd.torch: sums, a mean table's divided by its bags' lengths
        lens = torch.as_tensor(np.diff(np.asarray(off, np.int64))).clamp(min=1)
        mean = torch.tensor([m == "mean" for m in how]).repeat(len(lens) // T)
        div = torch.where(mean, lens, torch.ones_like(lens)).to(torch.float32)
        out = F.embedding_bag(torch.arange(r.shape[0]), r, o, mode="sum") / div.unsqueeze(1)
    return out.view(-1, T, r.shape[1])


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
def _read_ckpt_file(path):
    """One checkpoint file as read_ckpt returns it, plus 'parent' (None, or
    (iteration, file checksum) of an increment's parent) and 'shard'."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"ESDCKPT\0":
        raise ValueError("%s: not a checkpoint (magic)" % path)
    version, hsize = struct.unpack_from("<II", buf, 8)
    if version not in (1, 2):
        raise ValueError("%s: checkpoint version %d, this code reads versions 1 and 2"
                         % (path, version))
    seed, it, cursor, nrows, ndense, dclock = struct.unpack_from("<6Q", buf, 16)
    dim, opt, sf, shard, _, flags = struct.unpack_from("<6I", buf, 64)
    piter, psum = struct.unpack_from("<2Q", buf, 88)
    tdims = []
    if version == 2:  # the table block: each table's dim and rows
        nt = struct.unpack_from("<I", buf, 104)[0]
        ent = [struct.unpack_from("<IIQ", buf, hsize + 16 * t) for t in range(nt)]
        tdims = [e[0] for e in ent]
        rows_off = hsize + 16 * nt
        row_bytes = sum(n * (16 + 4 * d * (1 + sf)) for d, _, n in ent)
    else:
        rows_off = hsize
        row_bytes = nrows * (16 + 4 * dim * (1 + sf))
    if len(buf) != rows_off + row_bytes + 4 * ndense * (1 + sf) + 48:
        raise ValueError("%s: size %d does not match its header" % (path, len(buf)))
    if version == 1:
        dt = np.dtype([("key", "<u8"), ("clock", "<u8"), ("value", "<f4", (dim,)),
                       ("state", "<f4", (dim * sf,))])
        rows = np.frombuffer(buf, dt, nrows, rows_off)
        keys, clocks = rows["key"].copy(), rows["clock"].copy()
        values, state = rows["value"].copy(), rows["state"].reshape(nrows, dim * sf).copy()
    else:
        keys, clocks, values, state = _ckpt_rows_v2(buf, rows_off, nrows, dim, sf, tdims)
    p = rows_off + row_bytes
    dense = np.frombuffer(buf, np.float32, ndense * (1 + sf), p)
    return {"seed": seed, "iter": it, "cursor": cursor, "dim": dim, "opt": opt,
            "dense_clock": dclock, "keys": keys, "clocks": clocks, "values": values,
            "state": state, "table_dims": tdims,
            "dense": dense[:ndense].copy(), "dense_state": dense[ndense:].copy(),
            "parent": (piter, psum) if flags & 2 else None, "shard": shard}


def _ckpt_rows_v2(buf, off, nrows, dim, sf, tdims):
    """A version-2 file's rows, each at its table's dim d_t, padded to dim
    with zeros (values [r, dim], state [r, dim*sf] in sf blocks of dim)."""
    keys = np.zeros(nrows, np.uint64)
    clocks = np.zeros(nrows, np.uint64)
    values = np.zeros((nrows, dim), np.float32)
    state = np.zeros((nrows, dim * sf), np.float32)
    for i in range(nrows):
        k, c = struct.unpack_from("<QQ", buf, off)
        d = tdims[k >> 48] if (k >> 48) < len(tdims) else None
        if d is None:
            raise ValueError("row %#x of a table the file has no dim for" % k)
        f = np.frombuffer(buf, np.float32, d * (1 + sf), off + 16)
        keys[i], clocks[i] = k, c
        values[i, :d] = f[:d]
        for b in range(sf):
            state[i, b * dim:b * dim + d] = f[d + b * d:d + (b + 1) * d]
        off += 16 + 4 * d * (1 + sf)
    return keys, clocks, values, state


def _ckpt_parent(path, c):
    """The parent file of increment c read from path (esd/ckpt.h, Increments)."""
    piter, psum = c["parent"]
    d = os.path.dirname(path) or "."
    for kind in ("inc", "base"):
        p = os.path.join(d, "ps-shard%d.ckpt.%s%d" % (c["shard"], kind, piter))
        if os.path.exists(p):
            with open(p, "rb") as f:
                f.seek(-8, os.SEEK_END)  # the trailer's checksum: the file's
                if struct.unpack("<Q", f.read(8))[0] == psum:
                    return p
    raise ValueError("%s: the parent of this increment (iteration %d) is missing" % (path, piter))


def read_ckpt(path):
    """{'seed', 'iter', 'cursor', 'dim', 'opt', 'keys' uint64 [r], 'clocks'
    uint64 [r], 'values' float32 [r, dim], 'state' float32 [r, dim*s],
    'dense', 'dense_state'} of one shard file. An increment is merged with
    its parents as esd_ckpt_open does: the base's rows in order at their
    newest value, then newer rows in the order the increments hold them."""
    top = _read_ckpt_file(path)
    chain, p, c = [top], path, top
    while c["parent"] is not None:
        p = _ckpt_parent(p, c)
        c = _read_ckpt_file(p)
        chain.append(c)
    if len(chain) == 1:
        return top
    order, where = [], {}
    for lv, c in enumerate(reversed(chain)):  # base first
        for i, k in enumerate(c["keys"].tolist()):
            if k not in where:
                order.append(k)
            where[k] = (lv, i)
    files = list(reversed(chain))
    pick = [where[k] for k in order]
    out = dict(top)
    for f in ("keys", "clocks", "values", "state"):
        out[f] = np.stack([files[lv][f][i] for lv, i in pick]) if pick else top[f][:0]
    return out
