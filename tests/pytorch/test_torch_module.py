"""esd.torch against a real node (1 PS, 1 esdd; this process is the
trainer): the EmbeddingBagCollection's forward equals the cache's rows,
its backward adds into the gradient slots what np.add.at would (ids
repeated in a batch accumulate), bags of several ids pool by sum, mean
or a mode per table with the matching gradients (bit for bit those of a
sequential scatter-add, whatever the upstream gradient's strides), a batch
left uncommitted is an error, a batch indexed by feature name (KeyedBatch)
and a module configured by names return the named features with the full
module's gradients, weighted bags equal nn.EmbeddingBag with
per_sample_weights and sparse gradients bit for bit (a weighted stream's
micro-batches carry the stream's weights, which the module pools with),
the AUC helpers agree with a pairwise count, and the dense files of checkpoint
boundaries are found by iteration (load_dense). With --gpu the same through
device="cuda" (pinned host buffers, non-blocking copies): exits 77 where
torch sees no CUDA device.

usage: test_torch_module.py BIN_DIR [--gpu]     exit 0 pass, 1 fail, 77 skip
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
import torch_needed  # noqa: E402,F401 - exits 77 without torch

import numpy as np  # noqa: E402
import torch  # noqa: E402
GPU = "--gpu" in sys.argv
if GPU and not torch.cuda.is_available():
    print("skip: torch sees no CUDA device (torch %s, built %s CUDA)"
          % (torch.__version__, "with" if torch.version.cuda else "without"))
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools", "testbed"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import esd  # noqa: E402
import esd.torch as et  # noqa: E402
from esdcluster import Cluster  # noqa: E402
import esdio  # noqa: E402
from esd import esdio as esdio_w  # noqa: E402
import run as launcher  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def one_batch(t, mb, dev):
    """Every check on micro-batch mb; leaves its gradient slots as they were."""
    ebc = et.EmbeddingBagCollection(t, "sum", dev)
    b = et.Batch(mb, dev)
    rows = np.array(t.values)[mb.slots]  # (m, T, dim)
    out = ebc(b)
    check(out.shape == (mb.m, mb.tables, t.info["dim"]) and
          np.array_equal(out.detach().cpu().numpy(), rows),
          "forward: the cache's rows of the batch, bit for bit (%s)" % (out.device,))
    before = np.array(t.grads)
    up = torch.randn(out.shape, device=out.device)
    (out * up).sum().backward()
    want = before.astype(np.float64)
    np.add.at(want, mb.slots, up.cpu().numpy().astype(np.float64))
    got = np.array(t.grads)
    repeats = mb.slots.size - len(np.unique(mb.slots))
    # float32 sums of up to hundreds of terms against float64: 1e-4 absolute
    check(np.allclose(got, want, rtol=1e-5, atol=1e-4),
          "backward: gradient slots += upstream gradient per id (%d ids repeated in the "
          "batch, max abs diff %.2g)" % (repeats, float(np.abs(got - want).max())))
    t.grads[:] = before
    # bags: feature t of sample i is the bag slots[i, t:t+2] (ids of two features)
    flat = mb.slots.astype(np.int64)
    ids = np.stack([flat, np.roll(flat, -1, axis=1)], 2).reshape(-1)
    offsets = torch.arange(0, len(ids), 2)
    bag = et.Batch(mb, dev)
    bag.slots = torch.from_numpy(ids)
    vals = np.array(t.values)[ids].reshape(mb.m * mb.tables, 2, -1)
    # per table: even tables summed, odd ones averaged
    per_table = ["sum" if j % 2 == 0 else "mean" for j in range(mb.tables)]
    is_mean = np.tile([m == "mean" for m in per_table], mb.m)  # per bag
    for mode in ("sum", "mean", "per-table"):
        e = et.EmbeddingBagCollection(t, per_table if mode == "per-table" else mode, dev)
        o = e(bag, offsets)
        mean = is_mean if mode == "per-table" else np.full(len(is_mean), mode == "mean")
        ref = np.where(mean[:, None], vals.mean(1), vals.sum(1))
        check(np.allclose(o.detach().cpu().numpy().reshape(mb.m * mb.tables, -1), ref,
                          rtol=1e-6, atol=1e-7), "bags of 2 ids, %s pooling: forward" % mode)
        if mode == "per-table":  # evaluate.py's pooling of held-out bags is the module's
            ev = esdio.pool(np.array(t.values)[ids], np.arange(0, len(ids) + 1, 2), mb.tables,
                            per_table)
            check(torch.equal(ev, o.detach().cpu()), "esdio.pool, per table: the module's "
                  "forward bit for bit")
        up = torch.randn(o.shape, device=o.device)
        (o * up).sum().backward()
        g = np.repeat(up.cpu().numpy().reshape(mb.m * mb.tables, 1, -1), 2, 1)
        g = np.where(mean[:, None, None], g / 2, g)
        want = before.astype(np.float64)
        np.add.at(want, ids, g.reshape(len(ids), -1).astype(np.float64))
        check(np.allclose(np.array(t.grads), want, rtol=1e-5, atol=1e-4),
              "bags of 2 ids, %s pooling: each id gets its bag's gradient" % mode)
        t.grads[:] = before


def scatter_ref(before, slots, g, offsets=None, div=None):
    """The gradient slots after a sequential scatter-add in torch (the
    module's earlier backward: index_put_ with accumulate, key order)."""
    g = g.detach().to("cpu", torch.float32).contiguous()
    if offsets is not None:
        lens = torch.diff(offsets, append=torch.tensor([slots.numel()]))
        bag = torch.repeat_interleave(torch.arange(offsets.numel()), lens)
        if div is not None:
            g = g / div.unsqueeze(1)
        g = g.index_select(0, bag)
    want = torch.from_numpy(before.copy())
    want.index_put_((slots,), g, accumulate=True)
    return want.numpy()


def exact_backward(t, mb, dev):
    """backward adds into the slots bit for bit what a sequential
    scatter-add does, for a contiguous, a transposed and a broadcast
    upstream gradient, one id per bag and bags (sum, mean, per table); a
    slot outside the cache is an IndexError, decreasing bag offsets a
    ValueError, that add nothing."""
    before = np.array(t.grads)
    flat = torch.from_numpy(mb.slots.astype(np.int64)).reshape(-1)
    n, dim = flat.numel(), t.info["dim"]
    ups = {"contiguous": lambda o: torch.randn(o.shape, device=o.device),
           "transposed": lambda o: torch.randn(dim, mb.tables, mb.m,
                                               device=o.device).permute(2, 1, 0),
           "broadcast": lambda o: torch.full((1, 1, 1), 0.37, device=o.device).expand(o.shape)}
    lens = torch.from_numpy(np.random.default_rng(5).integers(0, 4, mb.m * mb.tables))
    offsets = torch.cumsum(lens, 0) - lens
    ids = flat[torch.arange(int(lens.sum())) % n]
    per_table = ["sum" if j % 2 == 0 else "mean" for j in range(mb.tables)]
    mean_div = lens.clamp(min=1).to(torch.float32)
    table_div = torch.where(torch.tensor([m == "mean" for m in per_table]).repeat(mb.m),
                            mean_div, torch.ones(len(lens)))
    cases = [("one id a feature", "sum", flat, None, None),
             ("bags, sum", "sum", ids, offsets, None),
             ("bags, mean", "mean", ids, offsets, mean_div),
             ("bags, per table", per_table, ids, offsets, table_div)]
    for what, mode, slots, offs, div in cases:
        e = et.EmbeddingBagCollection(t, mode, dev)
        b = et.Batch(mb, dev)
        b.slots = slots
        for kind, make in ups.items():
            o = e(b, offs)
            up = make(o)
            o.backward(up)
            want = scatter_ref(before, slots, up.reshape(-1, dim), offs, div)
            check(np.array_equal(np.array(t.grads), want),
                  "backward, %s, %s gradient: the slots a sequential scatter-add gives, "
                  "bit for bit" % (what, kind))
            t.grads[:] = before
    e = et.EmbeddingBagCollection(t, "sum", dev)
    bad = flat.clone()
    bad[-1] = t.info["capacity"]
    try:
        t.add_grads(bad.data_ptr(), n, 0, n, torch.ones(n, dim).data_ptr(), dim, 1)
        check(False, "a slot outside the cache is refused")
    except IndexError as ex:
        check(np.array_equal(np.array(t.grads), before),
              "a slot outside the cache is refused, nothing added: %s" % ex)
    offs = torch.tensor([0, 3, 2], dtype=torch.int64)
    try:
        t.add_grads(flat.data_ptr(), n, offs.data_ptr(), 3, torch.ones(3, dim).data_ptr(), dim, 1)
        check(False, "decreasing bag offsets are refused")
    except ValueError as ex:
        check(np.array_equal(np.array(t.grads), before),
              "decreasing bag offsets are refused, nothing added: %s" % ex)


def by_name(t, mb, dev, stream):
    """KeyedBatch by the stream's names; a module configured by names
    returns those features, and gives their rows the gradients the full
    module gives them, bit for bit (the others none)."""
    names = esdio_w.read_names(stream)
    kb = et.KeyedBatch(et.Batch(mb, dev), stream)
    check(kb.keys() == names and names[:2] == ["C1", "C2"], "KeyedBatch.keys(): the stream's "
          "names C1..C26")
    j = kb["C3"]
    ids = (mb.keys[:, 2] & np.uint64((1 << 48) - 1)).astype(np.int64)
    check(np.array_equal(j.values.numpy(), ids) and j.lengths.tolist() == [1] * mb.m and
          j.offsets.tolist() == list(range(mb.m + 1)) and
          np.array_equal(j.slots.numpy(), mb.slots[:, 2]) and set(kb.to_dict()) == set(names),
          "kb['C3']: its IDs, lengths, offsets and slots; to_dict() every feature")
    try:
        kb["C27"]
        check(False, "an unknown feature is refused")
    except KeyError as e:
        check("unknown feature 'C27'" in str(e), "kb['C27'] refused: %s" % e)
    class Bags:  # a micro-batch with bags: 2 samples, 2 tables, bags (1,), (), (2, 3), (4,)
        iter, m, global_k, checkpoint, tables = 0, 2, 2, False, 2
        keys = np.array([1, 2, 3, 4], np.uint64) | np.uint64(1 << 48)
        slots = np.array([10, 20, 30, 40], np.uint32)
        bag_off = np.array([0, 1, 1, 3, 4], np.uint32)
        labels, dense = np.zeros(2, np.float32), np.zeros((2, 0), np.float32)
    jb = et.KeyedBatch(et.Batch(Bags()), ["a", "b"])
    check(jb["a"].values.tolist() == [1, 2, 3] and jb["a"].offsets.tolist() == [0, 1, 3] and
          jb["b"].lengths.tolist() == [0, 1] and jb["b"].slots.tolist() == [40],
          "KeyedBatch of bags: each feature's IDs, offsets, lengths and slots")
    full = et.EmbeddingBagCollection(t, "sum", dev, features=stream)
    pick = et.EmbeddingBagCollection(t, {"C1": "mean"}, dev, features=names,
                                     tables=["C3", "C1", "C26"])
    before = np.array(t.grads)
    o = pick(kb)
    up = torch.randn(o.shape, device=o.device)
    o.backward(up)
    got = np.array(t.grads)
    t.grads[:] = before
    f = full(kb)
    upf = torch.zeros(f.shape, device=f.device)
    upf[:, [2, 0, 25]] = up
    f.backward(upf)
    check(o.shape == (mb.m, 3, t.info["dim"]) and
          torch.equal(o.detach().cpu(), f.detach().cpu()[:, [2, 0, 25]]) and
          list(pick.to_dict(o)) == ["C3", "C1", "C26"],
          "tables=['C3', 'C1', 'C26']: those features' pooled rows, in that order")
    check(np.array_equal(got, np.array(t.grads)),
          "by name: the gradient slots the full module leaves, bit for bit")
    t.grads[:] = before
    for bad, kw in (("'C27'", {"tables": ["C1", "C27"]}), ("'X'", {"pooling": {"X": "sum"}})):
        try:
            et.EmbeddingBagCollection(t, kw.get("pooling", "sum"), dev, features=names,
                                      tables=kw.get("tables"))
            check(False, "unknown name %s refused" % bad)
        except ValueError as e:
            check("unknown feature %s" % bad in str(e) and "C26" in str(e),
                  "unknown name %s refused: %s" % (bad, e))


def sparse_ref(before, lookups):
    """The gradient slots after a plain-torch embedding: nn.Embedding over
    the cache's rows with sparse gradients, each (slots, upstream) pair
    looked up and backpropagated, its gradient's rows then accumulated
    into the slots in order (index_put_ with accumulate)."""
    emb = torch.nn.Embedding(before.shape[0], before.shape[1], sparse=True)
    loss = 0
    for slots, up in lookups:
        loss = loss + (emb(slots) * up.detach().to("cpu", torch.float32)).sum()
    loss.backward()
    g = emb.weight.grad
    want = torch.from_numpy(before.copy())
    want.index_put_((g._indices()[0],), g._values(), accumulate=True)
    return want.numpy()


def weighted(t, mb, dev):
    """Weighted bags (per_sample_weights, a weighted stream's batch.weights):
    sum pooling's forward and its gradient slots equal nn.EmbeddingBag's
    (mode="sum", per_sample_weights, sparse gradients) over the cache's
    rows bit for bit; mean pooling is sum(w * row) / sum(w) with each row
    getting w * g / sum(w); a weight count other than the keys' is a
    ValueError."""
    before = np.array(t.grads)
    values = torch.from_numpy(np.array(t.values))
    flat = torch.from_numpy(mb.slots.astype(np.int64)).reshape(-1)
    rng = np.random.default_rng(11)
    lens = torch.from_numpy(rng.integers(0, 5, mb.m * mb.tables))
    offsets = torch.cumsum(lens, 0) - lens
    ids = flat[torch.arange(int(lens.sum())) % flat.numel()]
    w = torch.from_numpy(rng.uniform(-1.5, 2.5, ids.numel()).astype(np.float32))
    b = et.Batch(mb, dev)
    b.slots, b.offsets, b.weights = ids, offsets, w
    e = et.EmbeddingBagCollection(t, "sum", dev)
    o = e(b)  # the batch's own offsets and weights
    ref = torch.nn.EmbeddingBag(values.shape[0], values.shape[1], mode="sum", sparse=True)
    with torch.no_grad():
        ref.weight.copy_(values)
    r = ref(ids, offsets, per_sample_weights=w)
    check(torch.equal(o.detach().cpu().reshape(r.shape), r.detach()),
          "weighted bags, sum: forward equals nn.EmbeddingBag(mode='sum', "
          "per_sample_weights) bit for bit")
    up = torch.randn(o.shape, device=o.device)
    (o * up).sum().backward()
    (r * up.cpu().reshape(r.shape)).sum().backward()
    g = ref.weight.grad
    want = torch.from_numpy(before.copy())
    want.index_put_((g._indices()[0],), g._values(), accumulate=True)
    check(np.array_equal(np.array(t.grads), want.numpy()),
          "weighted bags, sum: the gradient slots nn.EmbeddingBag's sparse gradient gives, "
          "bit for bit")
    t.grads[:] = before
    # mean: sum(w * row) / sum(w) (1 where the weights sum to 0)
    e = et.EmbeddingBagCollection(t, "mean", dev)
    o = e(b, offsets, w)
    bag = torch.repeat_interleave(torch.arange(offsets.numel()), lens)
    sw = torch.zeros(offsets.numel()).index_add_(0, bag, w)
    sw = torch.where(sw == 0, torch.ones_like(sw), sw)
    check(torch.equal(o.detach().cpu().reshape(r.shape), r.detach() / sw.unsqueeze(1)),
          "weighted bags, mean: forward is sum(w * row) / sum(w)")
    up = torch.randn(o.shape, device=o.device)
    (o * up).sum().backward()
    gk = w.unsqueeze(1) * (up.cpu().reshape(r.shape) / sw.unsqueeze(1)).index_select(0, bag)
    want = torch.from_numpy(before.copy())
    want.index_put_((ids,), gk, accumulate=True)
    check(np.array_equal(np.array(t.grads), want.numpy()),
          "weighted bags, mean: each row gets w * g / sum(w), bit for bit")
    t.grads[:] = before
    try:
        e(b, offsets, w[:-1])
        check(False, "a weight count other than the keys' is refused")
    except ValueError as ex:
        check("weights" in str(ex), "a weight count other than the keys' is refused: %s" % ex)


def weighted_stream(bin_dir, work, dev):
    """A job on a weighted stream (esdio, weighted=True): the trainer's
    micro-batch carries each key's weight as written (mb.weights, 1 node:
    the stream's first samples in order), Batch.weights has them, and the
    module pools with them by default, its gradient slots those of
    nn.EmbeddingBag's sparse gradient bit for bit."""
    rng = np.random.default_rng(21)
    rows, m = [300, 40], 64
    lens = [np.ones(m * 4, np.int64), rng.integers(0, 4, m * 4)]
    vals = [rng.integers(0, r, int(ln.sum())) for r, ln in zip(rows, lens)]
    wts = [rng.integers(-8, 17, len(v)) / 8.0 for v in vals]
    path = os.path.join(work, "weighted.esd")
    with esdio_w.Writer(path, rows, max_bag=[1, 3], weighted=True) as w:
        w.write(rng.integers(0, 2, m * 4), None, [(v, ln) for v, ln in zip(vals, lens)],
                weights=wts)
    s = {"workers.n": 1, "workers.batch": m, "model.dim": 12, "job.iterations": 2,
         "data.stream": path, "model.optimizer": "sgd", "model.lr": 0.1}
    with Cluster(bin_dir, os.path.join(work, "weighted"), s) as c:
        c.trainers = 0
        c.start()
        c.wait_socket(0)
        t = esd.Trainer(c.node_dir(0))
        mb = t.next(timeout_ms=30000)
        want = []  # sample-major, table-minor: the first m samples' weights
        starts = [np.concatenate([[0], np.cumsum(ln)]) for ln in lens]
        for i in range(mb.m):
            for tb in range(len(rows)):
                want.append(wts[tb][starts[tb][i]:starts[tb][i + 1]])
        want = np.concatenate(want).astype(np.float32)
        check(t.info["weighted"] == 1 and mb.weights is not None and
              np.array_equal(mb.weights, want),
              "a weighted stream: the micro-batch's weights are the stream's, key by key")
        b = et.Batch(mb, dev)
        check(b.weights is not None and np.array_equal(b.weights.numpy(), want),
              "Batch.weights: the micro-batch's weights")
        kb = et.KeyedBatch(b, ["item", "history"])
        hist = np.concatenate([wts[1][starts[1][i]:starts[1][i + 1]] for i in range(mb.m)])
        check(np.array_equal(kb["history"].weights.numpy(), hist.astype(np.float32)) and
              kb["history"].weights.numel() == kb["history"].values.numel(),
              "KeyedBatch: a feature's weights, value by value (a weighted "
              "KeyedJaggedTensor's weights())")
        before = np.array(t.grads)
        e = et.EmbeddingBagCollection(t, "sum", dev)
        o = e(b)
        values = torch.from_numpy(np.array(t.values))
        ref = torch.nn.EmbeddingBag(values.shape[0], values.shape[1], mode="sum", sparse=True)
        with torch.no_grad():
            ref.weight.copy_(values)
        r = ref(b.slots, b.offsets, per_sample_weights=b.weights)
        check(torch.equal(o.detach().cpu().reshape(r.shape), r.detach()),
              "a weighted stream: the module pools with its weights (nn.EmbeddingBag's "
              "forward bit for bit)")
        ev = esdio.pool(np.array(t.values)[b.slots.numpy()], mb.bag_off.astype(np.int64),
                        mb.tables, "sum", mb.weights)
        check(torch.equal(ev.reshape(r.shape), o.detach().cpu().reshape(r.shape)),
              "esdio.pool with weights (evaluate.py's held-out bags): the module's forward")
        up = torch.randn(o.shape, device=o.device)
        (o * up).sum().backward()
        (r * up.cpu().reshape(r.shape)).sum().backward()
        g = ref.weight.grad
        gw = torch.from_numpy(before.copy())
        gw.index_put_((g._indices()[0],), g._values(), accumulate=True)
        check(np.array_equal(np.array(t.grads), gw.numpy()),
              "a weighted stream: the gradient slots nn.EmbeddingBag's sparse gradient gives")
        t.commit(mb, 0.0)
        for mb in t:
            t.commit(mb, 0.0)
        t.close()
        c.wait(timeout=60)


def unpooled(t, mb, dev):
    """EmbeddingCollection: each feature's rows unpooled, bit for bit the
    cache's, with lengths and offsets; backward gives the gradient slots
    what nn.Embedding's sparse gradient accumulated into them gives, bit
    for bit: one ID a feature, bags with empty ones, a feature with no
    IDs at all, by name and through to_padded; bad offsets are refused."""
    before = np.array(t.grads)
    values = np.array(t.values)
    T, dim = mb.tables, t.info["dim"]
    ec = et.EmbeddingCollection(t, dev)
    out = ec(et.Batch(mb, dev))
    check(list(out) == ["f%d" % j for j in range(T)] and
          all(np.array_equal(out["f%d" % j].values.detach().cpu().numpy(), values[mb.slots[:, j]])
              and out["f%d" % j].lengths.tolist() == [1] * mb.m and
              out["f%d" % j].offsets.tolist() == list(range(mb.m + 1)) for j in range(T)),
          "unpooled, one ID a feature: each feature's rows, the cache's bit for bit (%s)"
          % (out["f0"].values.device,))
    ups = {f: torch.randn(j.values.shape, device=j.values.device) for f, j in out.items()}
    sum((j.values * ups[f]).sum() for f, j in out.items()).backward()
    want = sparse_ref(before, [(out[f].slots, ups[f]) for f in out])
    check(np.array_equal(np.array(t.grads), want),
          "unpooled, one ID a feature: the slots nn.Embedding's sparse gradient gives, bit "
          "for bit (%d ids repeated)" % (mb.slots.size - len(np.unique(mb.slots))))
    t.grads[:] = before
    # bags of 0..3 IDs of each table's own column (a slot belongs to one table);
    # table 1's bags all empty
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 4, (mb.m, T))
    lens[:, 1] = 0
    ids = np.concatenate([mb.slots[(i + np.arange(lens[i, j])) % mb.m, j]
                          for i in range(mb.m) for j in range(T)]).astype(np.int64)
    offsets = torch.from_numpy(np.cumsum(lens.reshape(-1)) - lens.reshape(-1))
    b = et.Batch(mb, dev)
    b.slots = torch.from_numpy(ids)
    names = ["f%d" % j for j in range(T)]
    for tables in (None, ["f3", "f1", "f0"]):
        e = et.EmbeddingCollection(t, dev, tables=tables)
        o = e(b, offsets)
        ok = list(o) == (tables or names)
        for f, jag in o.items():
            j = names.index(f)
            col = [mb.slots[(i + np.arange(lens[i, j])) % mb.m, j] for i in range(mb.m)]
            col = np.concatenate(col).astype(np.int64)
            ok = ok and np.array_equal(jag.slots.numpy(), col) and \
                np.array_equal(jag.values.detach().cpu().numpy(), values[col]) and \
                jag.lengths.tolist() == lens[:, j].tolist() and \
                jag.offsets.tolist() == [0] + np.cumsum(lens[:, j]).tolist()
        check(ok and o["f1"].values.shape == (0, dim),
              "unpooled bags of 0..3 IDs, tables=%s: each feature's rows bag after bag, "
              "lengths and offsets; an all-empty feature (0, %d)" % (tables, dim))
        ups = {f: torch.randn(jag.values.shape, device=jag.values.device)
               for f, jag in o.items()}
        sum((jag.values * ups[f]).sum() for f, jag in o.items()).backward()
        want = sparse_ref(before, [(o[f].slots, ups[f]) for f in o])
        check(np.array_equal(np.array(t.grads), want),
              "unpooled bags, tables=%s: the slots nn.Embedding's sparse gradient gives, bit "
              "for bit" % (tables,))
        t.grads[:] = before
    # to_padded: a mean over each sequence in user code, gradients through it
    o = ec(b, offsets)["f0"]
    padded, mask = o.to_padded()
    L = int(lens[:, 0].max())
    rows0 = values[o.slots.numpy()]
    ref = np.zeros((mb.m, L, dim), np.float32)
    for i in range(mb.m):
        ref[i, :lens[i, 0]] = rows0[o.offsets[i]:o.offsets[i + 1]]
    check(padded.shape == (mb.m, L, dim) and np.array_equal(padded.detach().cpu().numpy(), ref)
          and mask.cpu().sum(1).tolist() == lens[:, 0].tolist(),
          "to_padded: (m, longest bag, dim) rows and the mask of real entries")
    def seq_mean(jag):  # user code: the mean of each sequence's rows
        p, mk = jag.to_padded()
        return (p * mk.unsqueeze(2)).sum(1) / mk.sum(1, keepdim=True).clamp(min=1)
    mean = seq_mean(o)
    up = torch.randn(mean.shape, device=mean.device)
    (mean * up).sum().backward()
    gpad = np.array(t.grads)
    t.grads[:] = before
    emb = torch.nn.Embedding(*before.shape, sparse=True)
    (seq_mean(et.Jagged(emb(o.slots), o.lengths, o.slots)) * up.cpu()).sum().backward()
    g = emb.weight.grad
    want = torch.from_numpy(before.copy())
    want.index_put_((g._indices()[0],), g._values(), accumulate=True)
    check(np.array_equal(gpad, want.numpy()),
          "to_padded, a mean over each sequence: the slots nn.Embedding gives through the "
          "same code, bit for bit")
    short, smask = o.to_padded(length=1)
    check(short.shape == (mb.m, 1, dim) and smask.cpu()[:, 0].tolist() ==
          (lens[:, 0] > 0).tolist(), "to_padded(length=1): each bag's first row")
    (short.sum() * 0).backward()
    t.grads[:] = before
    # by name, through a KeyedBatch and Session.embeddings' pooling="none"
    kb = et.KeyedBatch(et.Batch(mb, dev), ["c%d" % j for j in range(T)])
    ek = et.EmbeddingCollection(t, dev, features=kb.keys(), tables=["c2"])
    ok = ek(kb)
    check(list(ok) == ["c2"] and np.array_equal(ok["c2"].values.detach().cpu().numpy(),
                                                 values[mb.slots[:, 2]]),
          "unpooled by name: a KeyedBatch's feature c2 alone")
    for bad in (offsets[:-1], torch.flip(offsets, [0])):
        try:
            ec(b, bad)
            check(False, "bad bag offsets refused")
        except ValueError as e:
            check("EmbeddingCollection" in str(e), "bad bag offsets refused: %s" % e)
    check(np.array_equal(np.array(t.grads), before), "nothing added by refused batches")


def test_auc():
    rng = np.random.default_rng(3)
    y = rng.random(400) < 0.3
    s = rng.random(400) + 0.3 * y
    pos, neg = s[y], s[~y]
    pairs = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
    want = pairs / (len(pos) * len(neg))
    check(abs(et.auc(s, y) - want) < 1e-12, "auc == the pairwise count (%.6f)" % want)
    ties = np.array([0.5, 0.5, 0.5, 0.5])
    check(et.auc(ties, np.array([1, 0, 1, 0])) == 0.5, "auc: ties count half")
    m = et.AucMeter()
    logit = torch.from_numpy(np.log(s / 2 / (1 - s / 2)))  # sigmoid(logit) = s / 2
    m.add(logit, torch.from_numpy(y.astype(np.float32)))
    check(abs(m.value(reduce=False) - want) < 2e-3,
          "AucMeter (histogram) within 2e-3 of the exact AUC: %.6f" % m.value(reduce=False))


def test_load_dense(work):
    d = os.path.join(work, "dense-files")
    os.makedirs(d)
    check(et.dense_path(d, 0, 8) == os.path.join(d, "dense@8.pt") and
          et.dense_path(d, 2) == os.path.join(d, "dense.2.pt"), "dense_path names the files")
    torch.save({"iteration": 8, "model": {"w": 1}}, et.dense_path(d, 0, 8))
    torch.save({"iteration": 12, "model": {"w": 2}}, et.dense_path(d))
    s, p = et.load_dense(d, 8)
    check(s["model"]["w"] == 1 and p.endswith("dense@8.pt"), "load_dense: the boundary's file")
    s, p = et.load_dense(d, 12)
    check(s["model"]["w"] == 2 and p.endswith("dense.pt"), "load_dense: save()'s file of it")
    try:
        et.load_dense(d, 10)
        check(False, "load_dense of an iteration nobody saved fails")
    except esd.EsdError as e:
        check("iteration 10 is missing" in str(e) and "holds iteration 12" in str(e),
              "load_dense names what it found: %s" % e)


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    dev = "cuda" if GPU else None
    work = tempfile.mkdtemp(prefix="esd-torch-module.")
    stream = os.path.join(work, "stream.esd")
    launcher.gen_stream(bin_dir, stream, 2000, 5)
    # dim 12: rows of a vector block of 8 and a tail (the backward's two loops)
    s = {"workers.n": 1, "workers.batch": 256, "model.dim": 12, "job.iterations": 3,
         "data.stream": stream, "model.optimizer": "sgd", "model.lr": 0.1}
    with Cluster(bin_dir, work, s) as c:
        c.trainers = 0  # this process is the trainer
        c.start()
        c.wait_socket(0)
        t = esd.Trainer(c.node_dir(0))
        mb = t.next(timeout_ms=30000)
        one_batch(t, mb, dev)
        exact_backward(t, mb, dev)
        by_name(t, mb, dev, stream)
        unpooled(t, mb, dev)
        weighted(t, mb, dev)
        t.commit(mb, 0.0)

        class S:  # what RowOptimizer and batches() need of a Session
            trainer, current, device, _restore = t, None, None, None
        sess = S()
        rows = et.RowOptimizer(sess)
        gen = et.Session.batches(sess)
        next(gen)
        try:
            next(gen)
            check(False, "a batch not committed before the next is an error")
        except RuntimeError as e:
            check("not committed" in str(e), "a batch not committed before the next is an "
                  "error: %s" % e)
        rows.step(0.0)  # the batch is committed after all; the job goes on
        for mb in t:
            t.commit(mb, 0.0)
        t.close()
        c.wait(timeout=60)
    weighted_stream(bin_dir, work, dev)
    test_auc()
    test_load_dense(work)
    if failures:
        print("%d check(s) failed; files kept in %s" % (len(failures), work))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
