"""Write a dataset stream from Python: numpy arrays, a pandas DataFrame or a
PyTorch DataLoader's batches into the file the node daemons read
(docs/dataset.md; the same bytes esd-data writes). numpy only: a DataFrame
or a tensor is taken duck-typed (``to_numpy()``, ``numpy()``), neither
pandas nor torch is imported.

    from esd import esdio
    with esdio.Writer("clicks.esd", rows=[1000, 50000], ndense=2,
                      max_bag=[1, 8]) as w:          # table 1 has bags
        for labels, dense, item, history in batches:
            w.write(labels, dense, [item, (history_values, history_lengths)])
    # clicks.esd exists once the with block ends without an exception

Each write is checked as esd-data checks a sample before any of it is
kept: labels 0 or 1, ndense finite dense values a sample, every ID an
integer in 0 .. rows[t] - 1, one ID a sample for a single-ID table and
0 .. max_bag[t] for a bag table. A refused write raises StreamError naming
the sample (its index in the stream and its row in the batch or frame),
the field and the value, and appends nothing of the batch: what earlier
writes appended stays, and the writer goes on. The file is written under
a temporary name beside the final one and renamed when close() completes
it, so the final name never holds half a stream: an exception leaving the
with block, or discard(), removes the temporary file.

hash_ids and dense_log1p are esd-data convert's mappings (a value's bytes
hashed into its table's rows; DLRM's log(1 + max(x, 0))): a pipeline that
applies them writes the stream convert writes from the same data as text.
Blocks are stored uncompressed (esd-data convert --zstd compresses).
"""
import ctypes
import ctypes.util
import os
import struct
import tempfile

import numpy as np

__all__ = ["Writer", "StreamError", "write", "hash_ids", "dense_log1p", "read_names",
           "SHAPE_NAMES"]

MAX_TABLES = 256
MAX_DENSE = 256
MAX_ROWS = (1 << 48) - 1
MAX_BAG = 65535
BLOCK_SAMPLES = 4096
ORIGIN_OTHER = 4

_HDR_FIXED = 208
_TABLE_ENTRY = 16
_BLOCK_HDR = 40
_BLOCK_MAGIC = 0x4B4C4245  # "EBLK"
_INDEX_MAGIC = 0x58444E49  # "INDX"
_FLAG_NAMES = 2  # the header ends with a names section
_FLAG_WEIGHTS = 4  # every table's IDs are followed by an f32 weight each
NAME_LEN = 32  # a name's field: 1..31 bytes, NUL-padded

# The built-in shapes' columns: a stream of such a shape is named by them
# unless told otherwise, as esd-data gen and convert name theirs.
SHAPE_NAMES = {
    "criteo-kaggle": ["C%d" % i for i in range(1, 27)],
    "avazu": ["banner_pos", "site_id", "site_domain", "site_category", "app_id", "app_domain",
              "app_category", "device_id", "device_ip", "device_model", "device_type",
              "device_conn_type", "C14", "C15", "C18", "C19", "C20", "C21"],
    "criteo-search": ["product_age_group", "device_type", "audience_id", "product_gender",
                      "product_brand"] + ["product_category%d" % i for i in range(1, 8)] +
                     ["product_country", "product_id", "product_title", "partner_id",
                      "user_id"],
}
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


class StreamError(ValueError):
    """A sample, a description or a file the stream refuses; the message
    names the file, the sample and the field."""


# -- xxh64 (the stream's checksums) ---------------------------------------
_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def _merge(acc, v):
    return ((acc ^ _round(0, v)) * _P1 + _P4) & _M64


def _xxh64_py(data, seed=0):
    """XXH64 in Python (where libxxhash cannot be loaded)."""
    n, p = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64]
        for a, b, c, d in struct.iter_unpack("<4Q", data[:n - n % 32]):
            v = [_round(v[0], a), _round(v[1], b), _round(v[2], c), _round(v[3], d)]
        p = n - n % 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for x in v:
            h = _merge(h, x)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while p + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, p)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        p += 8
    if p + 4 <= n:
        h ^= (struct.unpack_from("<I", data, p)[0] * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        p += 4
    while p < n:
        h ^= (data[p] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        p += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def _load_xxhash():
    """libxxhash's XXH64 through ctypes (the library the runtime links), or
    None."""
    for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
        if not name:
            continue
        try:
            f = ctypes.CDLL(name).XXH64
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_uint64
        f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
        return f
    return None


_XXH64_C = _load_xxhash()


def xxh64(data, seed=0):
    """XXH64 of bytes (libxxhash when it loads, else Python: same value)."""
    data = bytes(data)
    if _XXH64_C is not None:
        return _XXH64_C(data, len(data), seed)
    return _xxh64_py(data, seed)


# -- esd-data convert's mappings ------------------------------------------
def hash_ids(values, table, rows):
    """convert's IDs of the values of table `table` (0-based) of `rows` rows:
    each value's bytes (str as UTF-8, bytes as they are, an integer as its
    decimal text) hashed to 1 + xxh64(bytes, table + 1) % (rows - 1); an
    empty value (or None) is 0, the missing feature. A uint64 array."""
    out = np.zeros(len(values), np.uint64)
    if rows <= 1:
        return out
    for i, v in enumerate(values):
        if v is None:
            continue
        b = v if isinstance(v, (bytes, bytearray)) else str(v).encode()
        if b:
            out[i] = 1 + xxh64(b, table + 1) % (rows - 1)
    return out


def dense_log1p(x):
    """convert's dense transform: log(1 + max(x, 0)) in double, as float32."""
    x = np.asarray(x, np.float64)
    return np.log1p(np.maximum(x, 0.0)).astype(np.float32)


def name_fault(name):
    """Why name (str) cannot name a table, or None: 1..31 bytes of
    [A-Za-z0-9_.:-], as esd-data checks."""
    b = name.encode() if isinstance(name, str) else None
    if b is None:
        return "not a string"
    if not b:
        return "empty"
    if len(b) >= NAME_LEN:
        return "longer than 31 bytes"
    if not set(b) <= _NAME_CHARS:
        return "a character outside [A-Za-z0-9_.:-]"
    return None


def read_names(path):
    """The feature names of a stream's tables, in table order: the stream's
    own (its header's names section), else a built-in shape's columns
    ("C1".."C26" for criteo-kaggle), else "t0", "t1", ... (a stream written
    before names, or without them)."""
    with open(path, "rb") as f:
        head = f.read(_HDR_FIXED)
        if len(head) < _HDR_FIXED or head[:8] != b"ESDDATA\0":
            raise StreamError("%s: not a dataset stream (magic)" % path)
        version, hbytes = struct.unpack_from("<II", head, 8)
        f.seek(0)
        h = f.read(hbytes)
    T, flags = struct.unpack_from("<I", h, 48)[0], struct.unpack_from("<I", h, 64)[0]
    if flags & _FLAG_NAMES:
        at = _HDR_FIXED + T * (_TABLE_ENTRY + (4 if version == 2 else 0))
        return [h[at + NAME_LEN * t:at + NAME_LEN * (t + 1)].split(b"\0")[0].decode()
                for t in range(T)]
    shape = h[16:48].split(b"\0")[0].decode(errors="replace")
    cols = SHAPE_NAMES.get(shape)
    return list(cols) if cols and len(cols) == T else ["t%d" % t for t in range(T)]


# -- inputs ------------------------------------------------------------------
def _array(x):
    """numpy of an array, a list, a torch tensor (CPU or not) or a pandas
    Series, taken duck-typed."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu().numpy()
    elif hasattr(x, "to_numpy"):  # a pandas Series or frame
        x = x.to_numpy()
    return np.asarray(x)


def _f32_to_bf16(d):
    """The C writer's f32 -> bf16: round to nearest even, NaN stays NaN."""
    u = d.view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, (u >> 16) | 0x40, r).astype("<u2")


class _Bad(Exception):
    """A refusal at row `row` of the batch (None: the batch as a whole)."""

    def __init__(self, row, what):
        super().__init__(what)
        self.row, self.what = row, what


class Writer:
    """A stream being written to `path` (see the module's text).

    rows          each table's cardinality (IDs are 0 .. rows[t] - 1)
    ndense        dense features a sample (0 .. 256)
    max_bag       None: every table one ID a sample (a version 1 stream);
                  an int for every table or one per table: 0 or 1 one ID,
                  2 .. 65535 bags of 0 .. max_bag IDs (version 2). The
                  header's bound comes down at close to the longest bag
                  written where the lengths keep their width, as esd-data
                  does
    dense_format  "f32" or "bf16" (half the bytes)
    block_samples samples a block (default 4096, fewer where a full block
                  of full bags would pass 1 GiB)
    shape, source, origin, seed, scale, max_rows   provenance kept in the
                  header (origin 4: other; scale and max_rows: what shrank
                  the cardinalities, as esd-data's --scale, --max-rows)
    allow_empty   close() writes a stream without samples (else refused:
                  the daemons refuse it)
    weighted      every ID carries a finite f32 weight (weighted bags,
                  docs/multihot.md; TorchRec's weighted KeyedJaggedTensor):
                  a bag column is then (values, lengths, weights) or
                  write(..., weights=[...]) gives them, one array a table
                  parallel to its IDs (None: weight 1); needs a bag table
    names         the tables' feature names, one a table ("C1", "user_id":
                  1..31 bytes of [A-Za-z0-9_.:-], unique), kept in the
                  header as esd-data convert --names keeps them; None: a
                  built-in shape's columns (shape="criteo-kaggle": C1..C26),
                  else none; () or False: none
    """

    def __init__(self, path, rows, ndense=0, max_bag=None, dense_format="f32",
                 block_samples=None, shape="esdio", source=None, origin=ORIGIN_OTHER,
                 seed=0, scale=1.0, max_rows=0, allow_empty=False, names=None,
                 weighted=False):
        self.path = os.fspath(path)
        self.rows = [int(r) for r in rows]
        self.ntables = len(self.rows)
        self.ndense = int(ndense)
        self.weighted = bool(weighted)
        self._describe(max_bag, dense_format, block_samples, shape, source, origin, seed)
        self._name(names)
        self.scale, self.max_rows = float(scale), int(max_rows)
        self.allow_empty = allow_empty
        self.count = 0
        self._pending = []  # batches not yet in a block: (labels, dense, lens, ids, weights)
        self._npending = 0
        self._index = []
        self._longest = [0] * self.ntables
        d = os.path.dirname(os.path.abspath(self.path))
        fd, self._tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(self.path) + ".",
                                         suffix=".tmp")
        self._f = os.fdopen(fd, "wb")
        self._f.write(self._header(0))
        self._off = self._hdr_bytes

    # -- description ----------------------------------------------------
    def _fail(self, what):
        raise StreamError("%s: %s" % (self.path, what))

    def _describe(self, max_bag, dense_format, block_samples, shape, source, origin, seed):
        T = self.ntables
        if not 1 <= T <= MAX_TABLES:
            self._fail("%d tables, expected 1..%d" % (T, MAX_TABLES))
        for t, r in enumerate(self.rows):
            if not 1 <= r <= MAX_ROWS:
                self._fail("table %d: rows %d not in 1..2^48-1" % (t, r))
        if not 0 <= self.ndense <= MAX_DENSE:
            self._fail("ndense %d not in 0..%d" % (self.ndense, MAX_DENSE))
        mb = [1] * T if max_bag is None else (
            [int(max_bag)] * T if np.isscalar(max_bag) else [int(m) for m in max_bag])
        if len(mb) != T:
            self._fail("max_bag has %d values for %d tables" % (len(mb), T))
        for t, m in enumerate(mb):
            if not 0 <= m <= MAX_BAG:
                self._fail("table %d: max_bag %d not in 0..%d" % (t, m, MAX_BAG))
        self.max_bag = [m if m > 1 else 1 for m in mb]
        self.bags = [m > 1 for m in self.max_bag]
        if self.weighted and not any(self.bags):
            self._fail("weighted IDs need a bag table (max_bag above 1)")
        self._ww = 4 if self.weighted else 0
        if dense_format not in ("f32", "bf16"):
            self._fail("dense_format %r: f32 or bf16" % (dense_format,))
        self.dense_format = dense_format
        self._dw = 4 if dense_format == "f32" else 2
        self._idw = [8 if r > (1 << 32) else 4 for r in self.rows]
        self._lw = [1 if m < 256 else 2 for m in self.max_bag]
        if block_samples is None:
            sb = 1 + self.ndense * self._dw + sum(
                self._lw[t] + self.max_bag[t] * (self._idw[t] + self._ww) if self.bags[t]
                else self._idw[t] + self._ww
                for t in range(T))
            block_samples = BLOCK_SAMPLES if BLOCK_SAMPLES * sb <= 1 << 30 else (1 << 30) // sb
        if not 1 <= block_samples <= 1 << 20:
            self._fail("block_samples %d not in 1..2^20" % block_samples)
        self.block_samples = int(block_samples)
        self.shape = shape.encode()
        self.source = (os.path.basename(self.path) if source is None else source).encode()
        if len(self.shape) > 31 or len(self.source) > 63:
            self._fail("shape (31 bytes at most) or source (63) too long")
        self.origin, self.seed = int(origin), int(seed)
        self._hdr_bytes = _HDR_FIXED + T * (_TABLE_ENTRY + (4 if any(self.bags) else 0)) + 8

    def _name(self, names):
        """Check and keep the tables' names (None: the shape's columns)."""
        if names is None:
            names = SHAPE_NAMES.get(self.shape.decode(), ())
            names = names if len(names) == self.ntables else ()
        names = list(names) if names is not False else []
        if names and len(names) != self.ntables:
            self._fail("%d names for %d tables" % (len(names), self.ntables))
        for t, n in enumerate(names):
            bad = name_fault(n)
            if bad:
                self._fail("table %d: name %r: %s" % (t, n, bad))
            if n in names[:t]:
                self._fail("table %d: name %r already names table %d"
                           % (t, n, names.index(n)))
        self.names = names
        if names:
            self._hdr_bytes += NAME_LEN * self.ntables

    def _header(self, index_off):
        T, bags = self.ntables, any(self.bags)
        h = bytearray(self._hdr_bytes)
        h[0:8] = b"ESDDATA\0"
        struct.pack_into("<II", h, 8, 2 if bags else 1, self._hdr_bytes)
        h[16:16 + len(self.shape)] = self.shape
        struct.pack_into("<6I", h, 48, T, self.ndense, 0 if self._dw == 4 else 1,
                         self.block_samples, (_FLAG_NAMES if self.names else 0) |
                         (_FLAG_WEIGHTS if self.weighted else 0), self.origin)
        struct.pack_into("<4Q2d2Q", h, 72, self.count, len(self._index), index_off, self.seed,
                         0.0, self.scale, self.max_rows, 0)
        h[144:144 + len(self.source)] = self.source
        for t in range(T):
            struct.pack_into("<Qd", h, _HDR_FIXED + _TABLE_ENTRY * t, self.rows[t], 0.0)
            if bags:
                struct.pack_into("<I", h, _HDR_FIXED + _TABLE_ENTRY * T + 4 * t,
                                 self.max_bag[t])
            if self.names:
                at = _HDR_FIXED + T * (_TABLE_ENTRY + (4 if bags else 0)) + NAME_LEN * t
                b = self.names[t].encode()
                h[at:at + len(b)] = b
        struct.pack_into("<Q", h, self._hdr_bytes - 8, xxh64(h[:-8]))
        return bytes(h)

    # -- checks -----------------------------------------------------------
    def _labels(self, labels):
        y = _array(labels).reshape(-1)
        if y.dtype.kind not in "biuf":
            raise _Bad(None, "labels of dtype %s, expected numbers 0 or 1" % y.dtype)
        bad = np.flatnonzero(~((y == 0) | (y == 1)))
        if len(bad):
            raise _Bad(bad[0], "label %r is not 0 or 1" % (y[bad[0]].item(),))
        return y.astype(np.uint8)

    def _dense(self, dense, n):
        D = self.ndense
        if dense is None:
            if D:
                raise _Bad(None, "no dense features, the stream has %d a sample" % D)
            return np.zeros((n, 0), np.float32)
        d = _array(dense)
        if d.ndim == 1 and D == 1:
            d = d.reshape(-1, 1)
        if d.ndim != 2 or d.shape[1] != D:
            raise _Bad(None, "dense of shape %s: %d features a sample, the stream has %d"
                       % (d.shape, d.shape[1] if d.ndim == 2 else -1, D))
        if d.shape[0] != n:
            raise _Bad(None, "dense has %d samples, labels %d" % (d.shape[0], n))
        if d.dtype.kind not in "biuf":
            raise _Bad(None, "dense of dtype %s, expected numbers" % d.dtype)
        d = d.astype(np.float32)
        bad = np.argwhere(~np.isfinite(d))
        if len(bad):
            i, j = bad[0]
            raise _Bad(i, "dense feature %d: %r is not a finite number" % (j, d[i, j].item()))
        return d

    def _weights(self, t, w, ln, nv):
        """Table t's weights (float32 [nv]) of one batch: w parallel to
        its IDs, or None (every weight 1)."""
        if w is None:
            return np.ones(nv, np.float32)
        if not self.weighted:
            raise _Bad(None, "table %d: weights given, the stream is not weighted "
                       "(Writer(..., weighted=True))" % t)
        a = _array(w).reshape(-1)
        if a.dtype.kind not in "biuf":
            raise _Bad(None, "table %d: weights of dtype %s, expected numbers" % (t, a.dtype))
        if len(a) != nv:
            raise _Bad(None, "table %d: %d weights for %d IDs" % (t, len(a), nv))
        with np.errstate(over="ignore", invalid="ignore"):
            a = a.astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(a))
        if len(bad):
            i = int(np.searchsorted(np.cumsum(ln), bad[0], side="right"))
            raise _Bad(i, "table %d: weight %r is not a finite float" % (t, a[bad[0]].item()))
        return a

    def _column(self, t, col, n, w=None):
        """Table t's (lengths int64 [n], IDs uint64, weights float32) of
        one batch."""
        if isinstance(col, tuple):  # (values, lengths[, weights]), KeyedJaggedTensor's
            if len(col) not in (2, 3):
                raise _Bad(None, "table %d: a bag column is (values, lengths) or (values, "
                           "lengths, weights)" % t)
            v, ln = _array(col[0]).reshape(-1), _array(col[1]).reshape(-1)
            if len(col) == 3:
                if w is not None:
                    raise _Bad(None, "table %d: weights given twice (in the column and "
                               "in weights=)" % t)
                w = col[2]
        else:
            a = _array(col) if any(hasattr(col, x) for x in ("__array__", "to_numpy", "detach")) \
                else None
            if a is not None and a.dtype != object:
                v = a.reshape(-1)
                ln = np.ones(len(v), np.int64)
            else:  # n sequences: one bag a sample
                seqs = [np.atleast_1d(_array(s)) for s in (col if a is None else a)]
                seqs = [s if s.size else np.zeros(0, np.int64) for s in seqs]
                ln = np.array([len(s) for s in seqs], np.int64)
                v = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        if len(ln) != n:
            raise _Bad(None, "table %d: %d samples, labels %d" % (t, len(ln), n))
        if ln.dtype.kind not in "iu" or v.dtype.kind not in "iu":
            raise _Bad(None, "table %d: IDs of dtype %s, expected integers (fill missing "
                       "values first: an ID is 0 .. rows - 1)" % (t, v.dtype))
        neg = np.flatnonzero(ln < 0)
        if len(neg):
            raise _Bad(neg[0], "table %d: bag length %d" % (t, ln[neg[0]]))
        if int(ln.sum()) != len(v):
            raise _Bad(None, "table %d: bag lengths sum to %d, %d IDs given"
                       % (t, int(ln.sum()), len(v)))
        most = self.max_bag[t] if self.bags[t] else 1
        over = np.flatnonzero((ln > most) | ((ln != 1) if not self.bags[t] else False))
        if len(over):
            i = over[0]
            raise _Bad(i, "table %d: %d IDs, the table takes %s%d" % (
                t, ln[i], "0.." if self.bags[t] else "", most))
        bad = np.flatnonzero((v < 0) | (v >= self.rows[t])) if v.dtype.kind == "i" else \
            np.flatnonzero(v >= self.rows[t])
        if len(bad):
            i = int(np.searchsorted(np.cumsum(ln), bad[0], side="right"))
            raise _Bad(i, "table %d: id %d not in 0..%d (the table has %d rows)"
                       % (t, v[bad[0]], self.rows[t] - 1, self.rows[t]))
        return ln, v.astype(np.uint64), self._weights(t, w, ln, len(v))

    def _check(self, labels, dense, ids, where, weights=None):
        try:
            y = self._labels(labels)
            n = len(y)
            d = self._dense(dense, n)
            cols = ids
            if cols is None:
                raise _Bad(None, "no IDs, the stream has %d tables" % self.ntables)
            if not isinstance(cols, (list, tuple)):
                a = _array(cols)
                if a.ndim != 2:
                    raise _Bad(None, "ids: a 2-D array (samples, tables) or a list of one "
                               "column a table")
                cols = [a[:, t] for t in range(a.shape[1])]
            if len(cols) != self.ntables:
                raise _Bad(None, "ids for %d tables, the stream has %d"
                           % (len(cols), self.ntables))
            if weights is not None and len(weights) != self.ntables:
                raise _Bad(None, "weights for %d tables, the stream has %d"
                           % (len(weights), self.ntables))
            wl = weights if weights is not None else [None] * self.ntables
            lens, vals, wts = zip(*(self._column(t, c, n, wl[t]) for t, c in enumerate(cols)))
        except _Bad as e:
            at = "" if e.row is None else "sample %d (%s): " % (self.count + e.row, where(e.row))
            self._fail(at + e.what)
        return y, d, lens, vals, wts

    # -- writing ------------------------------------------------------------
    def write(self, labels, dense=None, ids=None, _where=None, weights=None):
        """Append a batch: labels (n,), dense (n, ndense) or None without
        dense features, ids a (n, tables) integer array or a list of one
        column a table: an integer array (one ID a sample), a (values,
        lengths) pair, or n sequences of IDs (bags). Arrays may be numpy,
        lists, torch tensors or pandas Series. A weighted stream takes
        weights: one array a table parallel to its IDs, or None (weights
        1), or a bag column's third member. Returns the samples written.
        Raises StreamError (nothing of the batch kept) on a bad sample."""
        if self._f is None:
            self._fail("the writer is closed")
        where = _where or (lambda r: "row %d of the batch" % r)
        y, d, lens, vals, wts = self._check(labels, dense, ids, where, weights)
        n = len(y)
        for t in range(self.ntables):
            if n and self.bags[t]:
                self._longest[t] = max(self._longest[t], int(lens[t].max()))
        self._pending.append((y, d, lens, vals, wts))
        self._npending += n
        self.count += n
        while self._npending >= self.block_samples:
            self._flush(self.block_samples)
        return n

    def write_frame(self, frame, label, dense=(), tables=()):
        """Append a DataFrame's rows (taken duck-typed: frame[col].to_numpy()):
        label the label column, dense the dense feature columns, tables one
        column a table: integer IDs, or lists of IDs for a bag table. An error
        names the frame's row (its index label)."""
        index = getattr(frame, "index", None)

        def where(r):
            return "frame row %r" % (index[r],) if index is not None else "row %d" % r
        d = np.stack([_array(frame[c]) for c in dense], axis=1) if len(dense) else None
        return self.write(frame[label], d, [frame[c] for c in tables], _where=where)

    def write_batches(self, batches):
        """Append every batch of an iterable (a DataLoader): each a dict
        with "labels", "dense", "ids", or a (labels, dense, ids) tuple.
        Returns the samples written."""
        n = 0
        for b in batches:
            if isinstance(b, dict):
                n += self.write(b["labels"], b.get("dense"), b["ids"])
            else:
                n += self.write(*b)
        return n

    def _flush(self, n):
        """Write the first n pending samples as a block."""
        take, got, keep = [], 0, []
        for b in self._pending:
            m = len(b[0])
            if got >= n:
                keep.append(b)
            elif got + m <= n:
                take.append(b)
                got += m
            else:
                k = n - got
                take.append(_cut(b, 0, k))
                keep.append(_cut(b, k, m))
                got = n
        self._pending, self._npending = keep, self._npending - n
        self._write_block(take, n)

    def _write_block(self, parts, n):
        y = np.concatenate([p[0] for p in parts])
        d = np.concatenate([p[1] for p in parts]).astype("<f4")
        out = [y.tobytes(), (d if self._dw == 4 else _f32_to_bf16(d)).tobytes()]
        for t in range(self.ntables):
            if self.bags[t]:
                ln = np.concatenate([p[2][t] for p in parts])
                out.append(ln.astype("<u1" if self._lw[t] == 1 else "<u2").tobytes())
            v = np.concatenate([p[3][t] for p in parts])
            out.append(v.astype("<u4" if self._idw[t] == 4 else "<u8").tobytes())
            if self.weighted:
                out.append(np.concatenate([p[4][t] for p in parts]).astype("<f4").tobytes())
        payload = b"".join(out)
        bh = struct.pack("<IIQIIII", _BLOCK_MAGIC, n, self.count - self._npending - n,
                         len(payload), len(payload), 0, 0)
        bh += struct.pack("<Q", xxh64(bh + payload))
        self._f.write(bh)
        self._f.write(payload)
        self._index.append(self._off)
        self._off += len(bh) + len(payload)

    def close(self):
        """Write the last block, the index and the final header, and rename
        the file to its name. Returns the path. A stream without samples is
        refused (StreamError, nothing written) unless allow_empty."""
        if self._f is None:
            return self.path
        if not self.count and not self.allow_empty:
            self.discard()
            self._fail("no samples: not written (allow_empty=True writes an empty stream)")
        if self._npending:
            self._flush(self._npending)
        for t in range(self.ntables):  # the bound comes down to the longest bag
            m = max(self._longest[t], 2)
            if self.bags[t] and m < self.max_bag[t] and (m < 256) == (self.max_bag[t] < 256):
                self.max_bag[t] = m
        ix = struct.pack("<IIQ", _INDEX_MAGIC, 0, len(self._index))
        ix += struct.pack("<%dQ" % len(self._index), *self._index)
        ix += struct.pack("<Q", xxh64(ix))
        f = self._f
        try:
            f.write(ix)
            f.seek(0)
            f.write(self._header(self._off))
            f.flush()
            os.fsync(f.fileno())
            f.close()
            self._f = None
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(self._tmp, 0o666 & ~mask)
            os.replace(self._tmp, self.path)
        except OSError:
            self.discard()
            raise
        return self.path

    def discard(self):
        """Abandon the stream: remove the temporary file (the final name is
        left as it was)."""
        if self._f is not None:
            self._f.close()
            self._f = None
        if self._tmp and os.path.exists(self._tmp):
            os.unlink(self._tmp)
        self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is None:
            self.close()
        else:
            self.discard()
        return False

    def __del__(self):
        if getattr(self, "_f", None) is not None:
            self.discard()


def _cut(b, lo, hi):
    """Samples lo..hi of a pending batch."""
    y, d, lens, vals, wts = b
    nl, nv, nw = [], [], []
    for ln, v, w in zip(lens, vals, wts):
        s = np.concatenate([[0], np.cumsum(ln)])
        nl.append(ln[lo:hi])
        nv.append(v[s[lo]:s[hi]])
        nw.append(w[s[lo]:s[hi]])
    return y[lo:hi], d[lo:hi], nl, nv, nw


def write(path, labels, dense=None, ids=None, rows=None, **kw):
    """One call: a Writer of rows (and kw), one write, close. Returns the
    path."""
    ndense = 0 if dense is None else (_array(dense).shape[1] if _array(dense).ndim == 2 else 1)
    weights = kw.pop("weights", None)
    with Writer(path, rows, ndense=kw.pop("ndense", ndense), **kw) as w:
        w.write(labels, dense, ids, weights=weights)
    return path
