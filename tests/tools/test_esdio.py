"""esd.esdio, the Python stream writer, against esd-data:

- the stream written from numpy arrays is byte for byte the one esd-data
  convert writes from the same data as text: tsv-multi-hot (bags, version
  2; f32 and bf16 dense; several blocks) and criteo-kaggle (one ID a table,
  version 1);
- a stream with u64 IDs, u16 bag lengths, a pandas-like frame and a
  DataLoader-like iterable reads back (esd-data dump checks every block;
  examples/pytorch/esdio.read_bags gives the samples written);
- bad input is refused naming the sample, its row and the field; nothing
  of the refused batch is kept, the writer goes on; an exception in the
  with block leaves no file (and an older file under the name untouched);
- the example of docs/python.md "Your own data" runs as written.

usage: test_esdio.py SRC_DIR BIN_DIR      exit 0 pass, 1 fail, 77 skip
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print("skip: %s has no numpy (%s)" % (sys.executable, e))
    sys.exit(77)

SRC, BIN = (os.path.abspath(a) for a in sys.argv[1:3])
sys.path.insert(0, os.path.join(SRC, "runtime", "python"))
sys.path.insert(0, os.path.join(SRC, "examples", "pytorch"))
from esd import esdio  # noqa: E402
import esdio as reader  # noqa: E402  (examples/pytorch's reader)

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def esd_data(*argv):
    return subprocess.run([os.path.join(BIN, "esd-data")] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def same_bytes(a, b):
    x, y = open(a, "rb").read(), open(b, "rb").read()
    if x == y:
        return "identical, %d bytes" % len(x)
    at = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
    return "differ at byte %d (%d vs %d bytes)" % (at, len(x), len(y))


def multi_hot(tmp, dense_format, names=None):
    """tsv-multi-hot text and the same samples as arrays."""
    rng = np.random.default_rng(5)
    n, rows, D = 9000, [1000, 70000, 3], 2
    tsv = os.path.join(tmp, "clicks.tsv")
    labels = rng.integers(0, 2, n)
    dense = np.round(rng.exponential(20.0, (n, D)) - 3, 3)
    hexes = [[["%x" % v for v in rng.integers(0, 1 << 40, rng.poisson(2))] for _ in range(n)]
             for _ in rows]
    with open(tsv, "w") as f:
        for i in range(n):
            f.write("\t".join([str(labels[i])] + [repr(float(x)) for x in dense[i]] +
                              [",".join(hexes[t][i]) for t in range(len(rows))]) + "\n")
    want = os.path.join(tmp, "convert.esd")
    r = esd_data("convert", "--format", "tsv-multi-hot", "--tables", "3", "--dense", "2",
                 "--rows", ",".join(map(str, rows)), "--dense-format", dense_format, "-o",
                 want, tsv, *(["--names", ",".join(names)] if names else []))
    check(r.returncode == 0, "convert tsv-multi-hot: %s" % r.stdout.strip()[-200:])
    ids = []
    for t in range(len(rows)):
        flat = [h for bag in hexes[t] for h in bag]
        ids.append((esdio.hash_ids(flat, t, rows[t]), [len(b) for b in hexes[t]]))
    got = os.path.join(tmp, "esdio.esd")
    with esdio.Writer(got, rows, ndense=D, max_bag=64, dense_format=dense_format,
                      shape="tsv-multi-hot", source="clicks.tsv", names=names) as w:
        for lo in range(0, n, 1000):  # batches that do not align with the blocks
            hi = min(n, lo + 1000)
            w.write(labels[lo:hi], esdio.dense_log1p(dense[lo:hi]),
                    [(v[int(sum(ln[:lo])):int(sum(ln[:hi]))], ln[lo:hi]) for v, ln in ids])
    check(open(got, "rb").read() == open(want, "rb").read(),
          "tsv-multi-hot, %s dense, 9000 samples in 3 blocks%s: esdio == convert (%s)"
          % (dense_format, ", names %s" % names if names else "", same_bytes(got, want)))
    if names:
        check(esdio.read_names(got) == names and reader.read_bags(got)[4] == 3,
              "read_names: the stream's names; the examples' reader reads a named stream")


def weighted(tmp):
    """Weighted bags: tsv-multi-hot id:weight lines through convert
    --weighted and the same samples through esdio with weights (the
    (values, lengths, weights) triple and weights=) are the same bytes;
    esd-data dump shows the weights; a weight that is not finite, or
    weights on a stream without them, are refused naming sample and table."""
    rng = np.random.default_rng(9)
    n, rows = 3000, [500, 40]
    tsv = os.path.join(tmp, "weighted.tsv")
    labels = rng.integers(0, 2, n)
    bags = [[rng.integers(0, 1 << 30, rng.poisson(2)) for _ in range(n)] for _ in rows]
    wts = [[rng.integers(-16, 33, len(b)) / 8.0 for b in bags[t]] for t in range(len(rows))]
    with open(tsv, "w") as f:
        for i in range(n):
            f.write("\t".join([str(labels[i])] + [
                ",".join("%x" % v if k % 3 == 2 and w == 1.0 else "%x:%r" % (v, float(w))
                         for k, (v, w) in enumerate(zip(bags[t][i], wts[t][i])))
                for t in range(len(rows))]) + "\n")
    want = os.path.join(tmp, "weighted-convert.esd")
    r = esd_data("convert", "--format", "tsv-multi-hot", "--tables", "2", "--weighted",
                 "--rows", ",".join(map(str, rows)), "-o", want, tsv)
    check(r.returncode == 0, "convert tsv-multi-hot --weighted: %s" % r.stdout.strip()[-200:])
    cols, wcols = [], []
    for t in range(len(rows)):
        flat = ["%x" % v for bag in bags[t] for v in bag]
        cols.append((esdio.hash_ids(flat, t, rows[t]), [len(b) for b in bags[t]]))
        wcols.append(np.concatenate(wts[t]))
    got = os.path.join(tmp, "weighted-esdio.esd")
    with esdio.Writer(got, rows, max_bag=64, shape="tsv-multi-hot", source="weighted.tsv",
                      weighted=True) as w:
        for lo in range(0, n, 700):
            hi = min(n, lo + 700)
            ks = [(int(sum(ln[:lo])), int(sum(ln[:hi]))) for _, ln in cols]
            v0, l0 = cols[0]
            w.write(labels[lo:hi], None,
                    [(v0[ks[0][0]:ks[0][1]], l0[lo:hi], wcols[0][ks[0][0]:ks[0][1]]),
                     (cols[1][0][ks[1][0]:ks[1][1]], cols[1][1][lo:hi])],
                    weights=[None, wcols[1][ks[1][0]:ks[1][1]]])
    check(open(got, "rb").read() == open(want, "rb").read(),
          "weighted bags, 3000 samples: esdio == convert --weighted (%s)"
          % same_bytes(got, want))
    d = esd_data("dump", "-n", "1", got).stdout.split("|")[1].split()
    first = ["%d:%d:%s" % (t, esdio.hash_ids(["%x" % v], t, rows[t])[0], "%g" % w)
             for t in range(len(rows)) for v, w in list(zip(bags[t][0], wts[t][0]))[:1]]
    check(all(any(f.startswith(x.split(":")[0] + ":") and
                  f.split(",")[0] == x for f in d) for x in first),
          "esd-data dump prints id:weight (%s; %s)" % (" ".join(d), first))
    rb = reader.read_bags(got, weights=True)
    sm = np.concatenate([np.asarray(wts[t][i], np.float32) for i in range(n)
                         for t in range(len(rows))])
    check(len(rb) == 6 and np.array_equal(rb[5], sm) and len(rb[2]) == len(sm),
          "the examples' reader: each key's weight, sample by sample, table by table")
    st = esd_data("stat", "--json", got)
    j = json.loads(st.stdout)
    check(j["weighted"] and j["tables"][0]["weights"]["min"] == float(wcols[0].min()) and
          j["tables"][1]["weights"]["max"] == float(wcols[1].max()),
          "stat --json: weighted, each table's weight range")
    for what, kw, wt, msg in [
            ("a weight that is not finite", {"weighted": True}, [1.0, float("nan")],
             "table 0: weight nan is not a finite float"),
            ("weights on a stream without them", {}, [1.0, 2.0],
             "table 0: weights given, the stream is not weighted")]:
        try:
            with esdio.Writer(os.path.join(tmp, "wbad.esd"), [10], max_bag=4, **kw) as w:
                w.write([1], None, [([1, 2], [2])], weights=[wt])
            check(False, "%s: refused" % what)
        except esdio.StreamError as e:
            check(msg in str(e), "%s: refused naming sample and table (%s)" % (what, e))
    # a block whose weight is not finite (checksum intact) is refused by the reader
    nanf = os.path.join(tmp, "wnan.esd")
    with esdio.Writer(nanf, [10], max_bag=4, weighted=True) as w:
        w.write([1], None, [([1, 2], [2])], weights=[[1.0, 2.0]])
    raw = bytearray(open(nanf, "rb").read())
    at = struct.unpack_from("<I", raw, 12)[0]  # the header's bytes: the block follows
    stored = struct.unpack_from("<I", raw, at + 16)[0]
    struct.pack_into("<f", raw, at + 40 + stored - 4, float("nan"))  # the last weight
    struct.pack_into("<Q", raw, at + 32, esdio.xxh64(bytes(raw[at:at + 32]) +
                                                     bytes(raw[at + 40:at + 40 + stored])))
    open(nanf, "wb").write(raw)
    r = esd_data("dump", nanf)
    check(r.returncode == 1 and "sample 0 table 0: the weight of ID 2 of the bag is not finite" in r.stdout,
          "a stored weight that is not finite is refused naming block, sample, table and "
          "ID: %s" % r.stdout.strip()[-160:])
    bad = os.path.join(tmp, "wbad.tsv")
    open(bad, "w").write("1\t3:0.5,4\t1\n1\t3:inf\t1\n")
    r = esd_data("convert", "--format", "tsv-multi-hot", "--tables", "2", "--weighted",
                 "--rows", "10", "-o", os.path.join(tmp, "wbad.esd"), bad)
    check(r.returncode == 1 and "wbad.tsv:2: field 2 (table 0): '3:inf' (ID 1 of the bag): "
          "the weight is not a finite number" in r.stdout, "convert: a weight not finite "
          "is refused naming line, field, table and ID: %s" % r.stdout.strip()[-160:])
    r = esd_data("convert", "--format", "tsv-multi-hot", "--tables", "2", "--rows", "10",
                 "-o", os.path.join(tmp, "wbad.esd"), bad)
    check(r.returncode == 1 and "has a weight; convert with --weighted" in r.stdout,
          "convert: id:weight without --weighted is refused: %s" % r.stdout.strip()[-160:])


def criteo(tmp):
    """criteo-kaggle text (one ID a table, version 1) and the same as arrays."""
    rng = np.random.default_rng(6)
    n = 5000
    tsv = os.path.join(tmp, "train.txt")
    labels = rng.integers(0, 2, n)
    ints = rng.integers(-2, 1000, (n, 13))
    cats = [["%08x" % v if v % 7 else "" for v in rng.integers(0, 1 << 32, n)]
            for _ in range(26)]
    with open(tsv, "w") as f:
        for i in range(n):
            f.write("\t".join([str(labels[i])] + [str(v) for v in ints[i]] +
                              [cats[t][i] for t in range(26)]) + "\n")
    want = os.path.join(tmp, "criteo-convert.esd")
    r = esd_data("convert", "--format", "criteo-kaggle", "--scale", "1000", "-o", want, tsv)
    check(r.returncode == 0, "convert criteo-kaggle: %s" % r.stdout.strip()[-200:])
    rows = reader._header(open(want, "rb").read(), want)[5]
    got = os.path.join(tmp, "criteo-esdio.esd")
    w = esdio.Writer(got, rows, ndense=13, shape="criteo-kaggle", source="train.txt",
                     origin=1, scale=1000)
    w.write(labels, esdio.dense_log1p(ints),
            np.stack([esdio.hash_ids(cats[t], t, rows[t]) for t in range(26)], axis=1))
    w.close()
    check(open(got, "rb").read() == open(want, "rb").read(),
          "criteo-kaggle, 5000 samples in 2 blocks (version 1), named C1..C26 by "
          "both: esdio == convert (%s)" % same_bytes(got, want))
    check(esdio.read_names(want) == ["C%d" % i for i in range(1, 27)],
          "read_names: a criteo-kaggle stream's C1..C26")


def names(tmp):
    """Refused names; an unnamed stream reads as t0, t1, ..."""
    p = os.path.join(tmp, "names.esd")
    for bad, why in ((["a", "a"], "table 1: name 'a' already names table 0"),
                     (["a b", "c"], "a character outside"), (["x" * 32, "c"], "longer than 31"),
                     (["a"], "1 names for 2 tables")):
        try:
            esdio.Writer(p, [5, 5], names=bad)
            check(False, "names %r refused" % (bad,))
        except esdio.StreamError as e:
            check(why in str(e), "names %r refused: %s" % (bad, e))
    esdio.write(p, [0, 1], ids=np.array([[1, 2], [3, 4]]), rows=[5, 5])
    check(esdio.read_names(p) == ["t0", "t1"], "an unnamed stream's tables: t0, t1")


def read_back(tmp):
    rng = np.random.default_rng(7)
    n, rows = 3000, [5, (1 << 33) + 5, 400]
    path = os.path.join(tmp, "wide.esd")
    labels = rng.integers(0, 2, n).astype(bool)
    dense = rng.normal(size=(n, 1)).astype(np.float32)
    big = rng.integers(0, rows[1], n, dtype=np.uint64)
    bags = [list(rng.integers(0, rows[2], rng.integers(0, 300))) for _ in range(n)]
    frame = FakeFrame({"y": labels, "x": dense[:, 0], "small": rng.integers(0, 5, n),
                       "big": big, "bag": bags})
    w = esdio.Writer(path, rows, ndense=1, max_bag=[0, 1, 1000], block_samples=700)
    w.write_frame(frame, "y", ["x"], ["small", "big", "bag"])
    w.close()
    r = esd_data("dump", path, "-n", str(n))
    check(r.returncode == 0 and len(r.stdout.splitlines()) == n,
          "u64 IDs, u16 bag lengths, 5 blocks: esd-data dump reads (and checks) every block")
    lab, den, keys, off, T = reader.read_bags(path)
    flat = np.concatenate([[s, b] + [int(x) for x in bag] for s, b, bag in
                           zip(frame.cols["small"], big, bags)]).astype(np.uint64)
    tables = np.concatenate([[0, 1] + [2] * len(bag) for bag in bags]).astype(np.uint64)
    want = (tables << np.uint64(48)) | flat
    check(T == 3 and np.array_equal(lab, labels.astype(np.float32)) and
          np.array_equal(den, dense) and np.array_equal(keys, want),
          "the frame's labels, dense and keys read back (read_bags)")
    hdr = reader._header(open(path, "rb").read(), path)
    check(hdr[6] == [1, 1, max(299, max(len(b) for b in bags))],
          "max_bag 1000 came down to the longest bag (%s), u16 lengths kept" % hdr[6])

    # a DataLoader-like iterable of torch-like tensors: dicts of batches
    loader = [{"labels": FakeTensor(labels[i:i + 512]), "dense": FakeTensor(dense[i:i + 512]),
               "ids": [FakeTensor(frame.cols["small"][i:i + 512]), big[i:i + 512],
                       bags[i:i + 512]]} for i in range(0, n, 512)]
    p2 = os.path.join(tmp, "loader.esd")
    with esdio.Writer(p2, rows, ndense=1, max_bag=[0, 1, 1000], block_samples=700,
                      source="wide.esd") as w:
        w.write_batches(loader)
    check(open(p2, "rb").read() == open(path, "rb").read(),
          "the same samples through write_batches (a DataLoader's dicts) give the same file")


class FakeFrame:
    """What write_frame takes of a pandas DataFrame: frame[col].to_numpy(),
    frame.index."""

    def __init__(self, cols):
        self.cols = cols
        self.index = ["r%d" % i for i in range(len(next(iter(cols.values()))))]

    def __getitem__(self, c):
        return FakeSeries(self.cols[c])


class FakeSeries:
    def __init__(self, v):
        self.v = v

    def to_numpy(self):
        if not isinstance(self.v[0], list):
            return np.asarray(self.v)
        a = np.empty(len(self.v), object)  # a column of lists
        a[:] = self.v
        return a


class FakeTensor:
    def __init__(self, a):
        self.a = np.asarray(a)

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def refusals(tmp):
    rows = [10, 100]
    path = os.path.join(tmp, "bad.esd")
    with open(path, "w") as f:
        f.write("an older file\n")
    w = esdio.Writer(path, rows, ndense=2, max_bag=[1, 4])
    y = np.array([0, 1, 1, 0])
    d = np.ones((4, 2))
    good = [np.array([1, 2, 3, 4]), [[1], [], [2, 3], [99, 98, 97, 96]]]
    w.write(y, d, good)
    cases = [
        ("label 2", dict(labels=[0, 2, 1, 0]), "sample 5 (row 1 of the batch): label 2 is not"),
        ("label 0.5", dict(labels=[0, 1, 0.5, 0]), "sample 6 (row 2 of the batch): label 0.5"),
        ("ID at the rows", dict(ids=[np.array([1, 2, 10, 4]), good[1]]),
         "sample 6 (row 2 of the batch): table 0: id 10 not in 0..9"),
        ("negative ID", dict(ids=[np.array([1, 2, 3, 4]), [[1], [], [2, -3], [1]]]),
         "sample 6 (row 2 of the batch): table 1: id -3 not in 0..99"),
        ("bag above max_bag", dict(ids=[np.array([1, 2, 3, 4]), [[1], [], [2], [1] * 5]]),
         "sample 7 (row 3 of the batch): table 1: 5 IDs, the table takes 0..4"),
        ("bag in a single-ID table", dict(ids=[[[1], [2, 3], [3], [4]], good[1]]),
         "sample 5 (row 1 of the batch): table 0: 2 IDs, the table takes 1"),
        ("dense count", dict(dense=np.ones((4, 3))), "3 features a sample, the stream has 2"),
        ("NaN dense", dict(dense=np.array([[0, 1], [1, 1], [1, np.nan], [0, 0]])),
         "sample 6 (row 2 of the batch): dense feature 1: nan is not a finite number"),
        ("float IDs", dict(ids=[np.array([1.0, 2, 3, 4]), good[1]]),
         "table 0: IDs of dtype float64, expected integers"),
        ("tables", dict(ids=[good[0]]), "ids for 1 tables, the stream has 2"),
        ("samples", dict(ids=[good[0][:3], good[1]]), "table 0: 3 samples, labels 4"),
        ("lengths", dict(ids=[good[0], (np.array([1, 2]), np.array([1, 1, 1, 0]))]),
         "table 1: bag lengths sum to 3, 2 IDs given"),
    ]
    for what, over, msg in cases:
        a = dict(labels=y, dense=d, ids=good)
        a.update(over)
        try:
            w.write(**a)
            check(False, "%s refused" % what)
        except esdio.StreamError as e:
            check(str(e).startswith(path + ": ") and msg in str(e) and w.count == 4,
                  "%s refused, nothing kept: %s" % (what, e))
    fr = FakeFrame({"y": [0, 1], "a": [1, 12], "b": [[], [1]], "x": [0.0, 1.0],
                    "z": [1.0, 2.0]})
    try:
        w.write_frame(fr, "y", ["x", "z"], ["a", "b"])
        check(False, "a frame's bad ID refused")
    except esdio.StreamError as e:
        check("sample 5 (frame row 'r1'): table 0: id 12" in str(e),
              "a frame's bad ID names the frame's row: %s" % e)
    check(open(path).read() == "an older file\n", "the older file stays while writing")
    w.write(y, d, good)
    w.close()
    _, _, _, off, _ = reader.read_bags(path)
    check(len(off) == 8 * 2 + 1, "closed after the refusals: the 8 good samples, no other")

    p2 = os.path.join(tmp, "never.esd")
    try:
        with esdio.Writer(p2, rows, ndense=2, max_bag=[1, 4]) as w2:
            w2.write(y, d, good)
            w2.write([3, 0, 0, 0], d, good)
    except esdio.StreamError:
        pass
    check(not os.path.exists(p2) and not [f for f in os.listdir(tmp) if f.endswith(".tmp")],
          "an error in the with block: no file, no temporary file")
    try:
        esdio.Writer(p2, rows, ndense=2).close()
        check(False, "an empty stream refused")
    except esdio.StreamError as e:
        check("no samples" in str(e) and not os.path.exists(p2), "an empty stream: %s" % e)
    for what, kw, msg in [("rows", dict(rows=[0]), "rows 0 not in"),
                          ("max_bag", dict(rows=[5], max_bag=[70000]), "max_bag 70000"),
                          ("max_bag count", dict(rows=[5, 5], max_bag=[2]), "2 tables")]:
        try:
            esdio.Writer(p2, **kw)
            check(False, what + " refused")
        except esdio.StreamError as e:
            check(msg in str(e), "%s refused: %s" % (what, e))


def xxh():
    py = [esdio._xxh64_py(b"x" * n, s) for n in (0, 3, 4, 9, 31, 32, 100) for s in (0, 7)]
    c = [esdio.xxh64(b"x" * n, s) for n in (0, 3, 4, 9, 31, 32, 100) for s in (0, 7)]
    check(py == c and esdio._XXH64_C is not None,
          "the Python xxh64 equals libxxhash's on 14 inputs")


def doc_example(tmp):
    with open(os.path.join(SRC, "docs", "python.md")) as f:
        doc = f.read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S)
              if b.startswith("# example: write_stream.py\n")]
    check(len(blocks) == 1, "docs/python.md has the write_stream.py example")
    if not blocks:
        return
    d = os.path.join(tmp, "doc")
    os.makedirs(d)
    with open(os.path.join(d, "write_stream.py"), "w") as f:
        f.write(blocks[0])
    env = dict(os.environ, ESD_ROOT=SRC, ESD_BIN=BIN)
    r = subprocess.run([sys.executable, "write_stream.py"], cwd=d, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    print(r.stdout[-1500:])
    check(r.returncode == 0 and "refused: " in r.stdout and "valid checkpoint" in r.stdout,
          "the docs/python.md example runs as written (exit %d)" % r.returncode)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tmp = tempfile.mkdtemp(prefix="esd-esdio.")
    xxh()
    multi_hot(tmp, "f32")
    multi_hot(tmp, "bf16")
    multi_hot(tmp, "f32", ["item", "history", "cat.v2"])
    names(tmp)
    weighted(tmp)
    criteo(tmp)
    read_back(tmp)
    refusals(tmp)
    doc_example(tmp)
    if FAILS:
        print("%d check(s) failed; files kept in %s" % (len(FAILS), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
