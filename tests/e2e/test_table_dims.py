"""Per-table embedding dims (model.dims, docs/design.md §6): 4 node daemons
and reference trainers train a 26-table stream whose tables have dims 4, 8
and 16; the final tables equal esd-ref's with the same --dims (rtol 1e-5)
under one shard and SGD, and two shards, two trainers a node and Adam;
each row crosses the links with its table's dim (the link bytes are
the predicted rows' unpadded bytes plus the frame headers); every row's
padding past its table's dim is exactly zero (esd-export
--dims refuses a non-zero one), the export gives each table its own
shape, and a job warm-starts from it. The checkpoint holds each row at
its table's dim (version 2: the file is the header, the table block,
16 + 4 * d_t * (1 + state floats) bytes a row, the dense table and the
trailer); a job resumed from it (ps.resume_from) trains on to the
tables esd-ref trains in one go, as does one resumed from the same
checkpoint rewritten in version 1 (every row padded, as shards wrote it
before); resuming it under other dims is refused naming the table and
both dims. A job of tables of 8 and 64
floats moves rows of the two sizes esdctl plan gives. The batch-size
fitter (the default method's online sizes) counts a row at its bytes: a
node's observed rows are its predicted bytes in full rows, fewer than
the rows themselves.

usage: test_table_dims.py BIN_DIR
"""
import ctypes
import ctypes.util
import json
import os
import re
import struct
import subprocess
import sys

from e2e_util import Env, ClusterError
from esdcluster import Cluster, write_ini

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DIMS = "4,8*12,16*12,4"  # 26 tables (criteo-kaggle)
WANT = [4] + [8] * 12 + [16] * 12 + [4]
CASES = [
    ("hybrid-sgd", {"dispatch__method": "hybrid", "model__optimizer": "sgd"}),
    ("opt-adam-2-shards-2-trainers", {"dispatch__method": "opt", "model__optimizer": "adam",
                                      "model__lr": 0.01, "workers__trainers": 2,
                                      "SHARDS": 2}),
]


def check_wire_bytes(env, name, sums):
    """Each row crosses the links with its table's dim: every worker's link
    bytes per kind are its predicted rows' unpadded bytes (16 + 4 * d_t
    floats of value and state; gradients value alone) plus one header per
    frame (24 + 40 bytes, and a 16-byte tag on a keyed link)."""
    sides = {"miss_pull": "rx", "update_push": "tx", "evict_push": "tx"}
    for sm in sums:
        pred = sm["predicted_bytes"]
        heads = set()
        for kind, side in sides.items():
            got = sum(ln[kind][side + "_bytes"] for ln in sm["links"])
            frames = sum(ln[kind][side + "_frames"] for ln in sm["links"])
            if frames:
                extra = got - pred[kind]
                env.check(extra % frames == 0 and extra // frames in (64, 80),
                          "%s worker %d %s: %d link bytes == %d unpadded row bytes + %d "
                          "frame headers" % (name, sm["rank"], kind, got, pred[kind], frames))
                heads.add(extra // frames)
            else:
                env.check(got == 0 and pred[kind] == 0, "%s worker %d %s: no frames, no bytes"
                          % (name, sm["rank"], kind))
        env.check(len(heads) <= 1, "%s worker %d: one frame header size %s"
                  % (name, sm["rank"], heads))


def split_sizes(total, rows, small, big):
    """How many of rows rows of small or big bytes make total: the count of
    big ones, or None when none does."""
    if big == small:
        return rows if total == rows * big else None
    b, rest = divmod(total - rows * small, big - small)
    return b if rest == 0 and 0 <= b <= rows else None


def dims_8_64(env):
    """Tables of 8 and of 64 floats under Adagrad: the links carry exactly
    the predicted rows' unpadded bytes,
    and those are rows of the two sizes esdctl plan gives (16 + 4 * d * 2
    bytes: 80 and 528, a padded row 528): each worker's miss pull and evict
    push bytes split into whole rows of the two."""
    name = "dims-8-64"
    s = env.settings(**{"dispatch__method": "opt"})
    del s["model.dim"]
    s["model.dims"] = "8*13,64*13"
    _, sums = env.run(name, s)
    env.check_transfers(name, sums)
    check_wire_bytes(env, name, sums)
    job = os.path.join(env.root, name + ".ini")
    write_ini(job, dict(s, **{"job.insecure": "yes"}))
    r = subprocess.run([os.path.join(env.bin, "esdctl"), "plan", "--json", job],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sizes = json.loads(r.stdout)["wire_row_bytes"] if r.returncode == 0 else []
    env.check(sizes == [80] * 13 + [528] * 13,
              "esdctl plan: a row of 8 floats is 80 bytes on the wire, of 64 floats 528 (%s)"
              % (sizes if sizes else r.stdout.strip()[-200:]))
    if not sizes:
        return
    padded = 0
    for sm in sums:
        pred = sm["predicted_bytes"]
        for kind in ("miss_pull", "evict_push"):
            rows = sm["predicted"][kind]
            big = split_sizes(pred[kind], rows, 80, 528)
            env.check(big is not None, "%s worker %d %s: %d bytes are %d rows of 80 or 528 "
                      "bytes (%s of 528)" % (name, sm["rank"], kind, pred[kind], rows, big))
            padded += rows * 528 - pred[kind]
    env.check(padded > 0, "%s: %d bytes of padding no longer cross the links" % (name, padded))


def check_export(env, name, ck):
    """esd-export --dims of the run's checkpoint: exit 0 (every padding
    float zero) and one [rows, d_t] table each."""
    out = os.path.join(env.root, name + ".export")
    if not os.path.exists("/usr/bin/python3"):
        print("skip export check: no /usr/bin/python3 (numpy)")
        return None
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "esd-export"),
                        os.path.dirname(
        ck.split(",")[0]), out, "--stream", env.stream, "--dims", DIMS, "--bin", env.bin],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == 77 or "No module named" in r.stdout:
        print("skip export check: %s" % r.stdout.strip()[-200:])
        return None
    env.check(r.returncode == 0, "%s: esd-export --dims: every row's padding is zero (%s)"
              % (name, r.stdout.strip()[-300:]))
    if r.returncode:
        return None
    with open(os.path.join(out, "manifest.json")) as f:
        man = json.load(f)
    got = [t["dim"] for t in man["tables"]]
    env.check(got == WANT and man["dim"] == 16,
              "%s: the export's tables have their own dims (%s)" % (name, got))
    return out


def check_ckpt_size(env, name, ck):
    """The checkpoint's bytes: each row at its table's dim (esd-ref info
    gives its rows and dense floats; SGD: no state), below the padded
    layout's."""
    path = ck.split(",")[0]
    r = subprocess.run([os.path.join(env.bin, "esd-ref"), "info", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"(\d+) rows of dim (\d+).*dense table (\d+) floats", r.stdout, re.S)
    if r.returncode or not m or "version 2: 26 tables of dims 4,8," not in r.stdout:
        env.check(False, "%s: esd-ref info %s: version 2 with the tables' dims: %s"
                  % (name, path, r.stdout.strip()[-300:]))
        return
    rows, dim, dense = int(m.group(1)), int(m.group(2)), int(m.group(3))
    size = os.path.getsize(path)
    padded = 128 + rows * (16 + 4 * dim) + 4 * dense + 48
    env.check(size < padded, "%s: the checkpoint is %d bytes, %d padded (%d rows)"
              % (name, size, padded, rows))
    print("figure: %s checkpoint %d bytes per-table, %d padded" % (name, size, padded))


def xxh64(data):
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return lib.XXH64(data, len(data), 0)


def to_version1(src, dst):
    """The version-2 checkpoint src (SGD: no state) rewritten as version 1,
    every row padded with zeros to the header's dim (esd/ckpt.h)."""
    with open(src, "rb") as f:
        buf = f.read()
    h = bytearray(buf[:128])
    dim = struct.unpack_from("<I", h, 64)[0]
    nrows, ndense = struct.unpack_from("<QQ", h, 40)
    nt = struct.unpack_from("<I", h, 104)[0]
    dims = [struct.unpack_from("<I", buf, 128 + 16 * t)[0] for t in range(nt)]
    off, body = 128 + 16 * nt, bytearray()
    for _ in range(nrows):
        key = struct.unpack_from("<Q", buf, off)[0]
        d = dims[key >> 48]
        body += buf[off:off + 16 + 4 * d] + bytes(4 * (dim - d))
        off += 16 + 4 * d
    body += buf[off:off + 4 * ndense]
    struct.pack_into("<I", h, 8, 1)
    h[104:120] = bytes(16)
    struct.pack_into("<Q", h, 120, xxh64(bytes(h[:120])))
    t = bytearray(b"ESDCKEND" + struct.pack("<QQQQ", nrows, ndense, xxh64(bytes(body)),
                                            struct.unpack_from("<Q", h, 120)[0]))
    t += struct.pack("<Q", xxh64(bytes(t)))
    with open(dst, "wb") as f:
        f.write(bytes(h) + bytes(body) + bytes(t))


def resume_dims(env, name, s, ck, old=None, tag="resumed"):
    """A job resumed from the run's checkpoint (ps.resume_from; old: that
    directory) to 60 iterations: its tables equal esd-ref's trained 60
    iterations at once."""
    old = old or os.path.dirname(ck.split(",")[0])
    r = dict(s, **{"job.iterations": 60, "ps.resume_from": old})
    work, ck2 = env.run_dirs(r, name + "-" + tag)
    with Cluster(env.bin, work, r) as c:
        c.start(resume=True)
        c.wait(timeout=120)
    ref = os.path.join(env.root, name + "-60.ref.ckpt")
    if not os.path.exists(ref):
        ref = env.reference(name + "-60", dict(s, **{"job.iterations": 60}))
    ok, out = env.compare(os.path.join(ck2, "ps-shard0.ckpt"), ref)
    env.check(ok, "%s: %s from iteration 50 to 60 == esd-ref --dims of 60 iterations: %s"
              % (name, tag, out.splitlines()[-1] if out else ""))


def resume_version1(env, name, s, ck):
    """The same from the checkpoint rewritten in version 1 (padded rows)."""
    old = os.path.join(env.root, name + "-v1")
    os.makedirs(old, exist_ok=True)
    to_version1(ck.split(",")[0], os.path.join(old, "ps-shard0.ckpt"))
    r = subprocess.run([os.path.join(env.bin, "esd-ref"), "info",
                        os.path.join(old, "ps-shard0.ckpt")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    env.check(r.returncode == 0 and "version 2" not in r.stdout,
              "%s: the version-1 rewrite is a valid checkpoint (%s)"
              % (name, r.stdout.strip()[-200:]))
    resume_dims(env, name, s, ck, old=old, tag="resumed-from-version-1")


def resume_other_dims(env, s, ck):
    """esd-ps resuming the run's checkpoint (ps.resume_from) under other
    dims: refused naming the table and both dims."""
    work = os.path.join(env.root, "other-dims")
    os.makedirs(os.path.join(work, "ckpt"), exist_ok=True)
    job = os.path.join(work, "job.ini")
    write_ini(job, dict(s, **{"job.insecure": "yes", "model.dims": "4*25,16",
                              "ps.resume_from": os.path.dirname(ck.split(",")[0]),
                              "ps.checkpoint_dir": os.path.join(work, "ckpt")}))
    try:
        r = subprocess.run([os.path.join(env.bin, "esd-ps"), "--config", job, "--shard", "0",
                            "--listen", "127.0.0.1:0", "--resume"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        rc, out = r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", str(e.output)
    line = [ln for ln in out.splitlines() if "has table 1 at dim 8, this job at dim 4" in ln]
    env.check(rc not in (0, "timeout") and line,
              "resuming under other model.dims is refused naming table and dims (exit %s): %s"
              % (rc, line[:1] or out.strip()[-300:]))


def fit_counts_bytes(env):
    """The default method (sizes fitted online) under model.dims: each
    node's fitter counted every iteration's rows as its predicted bytes
    over a full row's, rounded up (the dispatcher's charge)."""
    s = env.settings(model__optimizer="sgd", job__iterations=12)
    del s["model.dim"], s["dispatch.method"], s["dispatch.alpha"]
    s["model.dims"] = DIMS
    full = 16 + max(WANT) * 4  # SGD: key, clock and a row of the largest dim
    _, sums = env.run("fit-dims", s)
    for sm in sums:
        ob = (sm.get("size_model") or {}).get("observed") or {}
        it, rows, anyd, b = (ob.get(k, 0) for k in ("iterations", "rows", "rows_any_dim",
                                                    "bytes"))
        env.check(it == 12 and 0 < rows < anyd and b <= rows * full < b + it * full,
                  "fit-dims worker %d: the fitter counted %d rows for %d predicted rows of "
                  "%d bytes over %d iterations (full rows of %d bytes, rounded up per "
                  "iteration)" % (sm["rank"], rows, anyd, b, it, full))


def main():
    env = Env(sys.argv[1], "table-dims")
    env.gen_stream()
    try:
        for name, over in CASES:
            s = env.settings(**over)
            del s["model.dim"]
            s["model.dims"] = DIMS
            shards = s.pop("SHARDS", 1)
            ck, sums = env.run(name, s, shards=shards)
            env.check_transfers(name, sums)
            check_wire_bytes(env, name, sums)
            ref = env.reference(name, s)
            ok, out = env.compare(ck, ref)
            env.check(ok, "%s: final tables == esd-ref --dims %s (rtol 1e-5, atol 2e-6): %s"
                      % (name, DIMS, out.splitlines()[-1] if out else ""))
            exp = check_export(env, name, ck)
            if exp and name == "hybrid-sgd":
                # a job warm-started from the export: each [rows, d_t] table
                # loads into rows padded to model.dim, and trains on
                w = dict(s, **{"ps.warm_start": exp, "job.iterations": 5})
                env.run(name + "-warm", w)
                env.check(True, "%s: a job warm-started from the export trains" % name)
            if name == "hybrid-sgd":
                check_ckpt_size(env, name, ck)
                resume_dims(env, name, s, ck)
                resume_version1(env, name, s, ck)
                resume_other_dims(env, s, ck)
        dims_8_64(env)
        fit_counts_bytes(env)
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
