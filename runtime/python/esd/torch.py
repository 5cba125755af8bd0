"""PyTorch over an ESD node: embeddings as an nn.Module with autograd, the
dense model under DistributedDataParallel, the commit as an optimizer step.

    import torch
    import esd.torch as et

    s = et.Session()                          # under torchrun: attach, gloo
    ebc = s.embeddings(pooling="sum")         # the job's tables
    model = s.distributed(MyModel(s.tables, s.dim, s.ndense))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rows = s.row_optimizer()                  # the commit
    for batch in s.batches():
        logits = model(ebc(batch), batch.dense)
        loss = et.bce(logits, batch)          # summed, / the global batch
        opt.zero_grad()
        loss.backward()                       # row gradients go to the daemon
        opt.step()
        rows.step(loss)                       # commit: the runtime updates rows
        s.progress(logits, batch, loss)       # rank 0: loss, AUC, samples/s
    s.save(model, opt)
    s.close()

EmbeddingBagCollection.forward(batch) returns an (m, tables, dim) tensor
(a job with model.dims, tables of their own dims: (m, d_1 + ... + d_T),
the features side by side as TorchRec's KeyedTensor; s.dims lists them):
out[:, t] is feature t's pooled rows (sum or mean of its bag; a bag of one
id, as every feature of a Criteo-shaped stream, is its row). The rows are
gathered from the node's shared cache straight into that tensor; backward
adds each id's gradient into the daemon's gradient slot of its row (ids
repeated in a micro-batch accumulate). EmbeddingCollection
(s.embeddings(pooling="none")) returns the rows unpooled instead, a
Jagged per feature for sequence features. The dense part is the user's
module: Session.distributed wraps it in DistributedDataParallel over gloo
with a hook that sums the trainers' gradients instead of averaging them,
so a loss divided by the global batch (bce) gives every parameter the
gradient one process would compute on the whole batch.
"""
import datetime
import faulthandler
import os
import signal
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

import esd

__all__ = ["Session", "Batch", "KeyedBatch", "Jagged", "EmbeddingBagCollection",
           "EmbeddingCollection", "RowOptimizer", "bce", "auc",
           "AucMeter", "mlp"]

# The cache is mapped read-only into the trainer: torch warns that a tensor
# over a read-only array could be written; the module never writes it.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


class Batch:
    """One micro-batch as tensors: `dense` (m, ndense) and `labels` (m,)
    float32, `slots` int64 (the cache slot of each id: (m, tables), or on a
    stream with bags the flat (nkeys,) ids bag by bag), `offsets` (None, or
    with bags the (m * tables,) int64 start of each bag in slots),
    `weights` (None, or on a weighted stream the (nkeys,) float32 weight of
    each id, parallel to slots), and
    `iter`, `m`, `global_k` (the samples of the whole iteration: divide a
    summed loss by it), `checkpoint` (the iteration is a checkpoint
    boundary). Valid until the next batch."""

    def __init__(self, mb, device=None):
        self.mb = mb
        self.iter, self.m, self.global_k = mb.iter, mb.m, mb.global_k
        self.checkpoint = mb.checkpoint
        self.slots = torch.from_numpy(mb.slots.astype(np.int64))
        self.offsets = None
        if mb.slots.ndim == 1:  # bags (docs/multihot.md)
            self.offsets = torch.from_numpy(mb.bag_off[:-1].astype(np.int64))
        w = getattr(mb, "weights", None)  # a weighted stream: a weight per key
        self.weights = None if w is None else torch.from_numpy(np.array(w, np.float32))
        self.dense = torch.from_numpy(np.array(mb.dense))
        self.labels = torch.from_numpy(np.array(mb.labels))
        if device is not None:
            self.dense = self.dense.to(device)
            self.labels = self.labels.to(device)


def _feature_names(features, tables):
    """The job's feature names in table order: features a list of them, a
    stream's path (its names, esd.esdio.read_names), or None ("f0",
    "f1", ...)."""
    if features is None:
        return ["f%d" % t for t in range(tables)]
    if isinstance(features, (str, os.PathLike)):
        from esd import esdio
        features = esdio.read_names(features)
    features = [str(f) for f in features]
    if len(features) != tables or len(set(features)) != len(features):
        raise ValueError("features: %d distinct names, one for each of the job's %d tables, "
                         "not %r" % (tables, tables, features))
    return features


def _unknown(name, features):
    return KeyError("unknown feature %r: the job's features are %s" % (name, ", ".join(features)))


class Jagged:
    """One feature's bags: `values` bag after bag (sample order): in a
    KeyedBatch the int64 IDs, in EmbeddingCollection's output their
    (n, dim) rows; `lengths` (m,) and `offsets` (m + 1,) int64 (bag i is
    values[offsets[i]:offsets[i + 1]]), and `slots` the cache slot of each
    value (what the modules read); `weights` each value's weight (a
    KeyedBatch of a weighted stream, like a weighted KeyedJaggedTensor's
    weights()), else None."""

    def __init__(self, values, lengths, slots, weights=None):
        self.values, self.lengths, self.slots = values, lengths, slots
        self.weights = weights
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])

    def __repr__(self):
        return "Jagged(%d bags, %d values)" % (self.lengths.numel(), self.values.shape[0])

    def to_padded(self, length=None, value=0):
        """(padded, mask): values as (m, L, ...) with each bag's entries
        first and value after them, and the (m, L) bool mask of the real
        entries; L the longest bag, or length (longer bags cut to their
        first length entries). Differentiable in values (each entry's
        gradient is its padded position's)."""
        m, n = self.lengths.numel(), self.values.shape[0]
        L = (int(self.lengths.max()) if m else 0) if length is None else int(length)
        bag = torch.repeat_interleave(torch.arange(m), self.lengths)
        pos = torch.arange(n) - self.offsets[:-1][bag]
        vals = self.values
        if L < int(self.lengths.max() if m else 0):
            keep = pos < L
            bag, pos = bag[keep], pos[keep]
            vals = vals[keep.to(vals.device)]
        mask = torch.zeros(m, L, dtype=torch.bool)
        mask[bag, pos] = True
        dev = vals.device
        padded = vals.new_full((m, L) + tuple(vals.shape[1:]), value)
        padded = padded.index_put((bag.to(dev), pos.to(dev)), vals)
        return padded, mask.to(dev)


class KeyedBatch:
    """A Batch indexed by feature name, like TorchRec's KeyedJaggedTensor:
    keys() the names in table order, kb["C1"] a Jagged (values, lengths,
    offsets; weights on a weighted stream), to_dict() {name: Jagged};
    dense, labels, m, iter and
    global_k are the batch's. features: the job's names in table order
    (a list, or the stream's path: its names). An EmbeddingBagCollection
    takes a KeyedBatch as it takes the Batch. Valid until the next batch."""

    def __init__(self, batch, features):
        self.batch = batch
        self._features = _feature_names(features, batch.mb.tables)
        self.dense, self.labels, self.m = batch.dense, batch.labels, batch.m
        self.iter, self.global_k = batch.iter, batch.global_k
        self._cache = {}

    def keys(self):
        return list(self._features)

    def __getitem__(self, name):
        if name not in self._features:
            raise _unknown(name, self._features)
        if name not in self._cache:
            self._cache[name] = self._column(self._features.index(name))
        return self._cache[name]

    def _column(self, t):
        """Table t's IDs, bag lengths and slots out of the micro-batch."""
        mb, T, m = self.batch.mb, self.batch.mb.tables, self.m
        ids = (mb.keys.astype(np.uint64) & np.uint64((1 << 48) - 1)).astype(np.int64)
        slots = mb.slots.astype(np.int64)
        w = getattr(self.batch, "weights", None)
        if mb.slots.ndim == 2:  # one ID a feature
            return Jagged(torch.from_numpy(ids[:, t].copy()), torch.ones(m, dtype=torch.int64),
                          torch.from_numpy(slots[:, t].copy()))
        off = mb.bag_off.astype(np.int64)
        lo, hi = off[t:m * T:T], off[t + 1:m * T + 1:T]
        pick = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)] + [np.zeros(0, np.int64)])
        return Jagged(torch.from_numpy(ids[pick]), torch.from_numpy(hi - lo),
                      torch.from_numpy(slots[pick]),
                      None if w is None else w[torch.from_numpy(pick)])

    def to_dict(self):
        return {f: self[f] for f in self._features}


class _Lookup(torch.autograd.Function):
    """Pooled rows of bags of cache slots; backward adds into the daemon's
    gradient slots and returns nothing to autograd (the rows are not torch
    parameters: the runtime owns and updates them)."""

    @staticmethod
    def forward(ctx, anchor, ebc, slots, offsets, weights=None):
        ctx.ebc, ctx.slots, ctx.offsets, ctx.weights = ebc, slots, offsets, weights
        if weights is not None:  # weighted bags: sum(w * row), a mean's / sum(w)
            pooled, ctx.wdiv = ebc._pool_weighted(slots, offsets, weights)
            return pooled
        if offsets is None:  # one id per bag: a gather
            return torch.index_select(ebc.values, 0, slots, out=ebc._out(slots.numel()))
        pinned = ebc._pinned_out(offsets.numel())  # else pooled in place, not copied
        if ebc._mean is None:  # one pooling for every table
            pooled = F.embedding_bag(slots, ebc.values, offsets, mode=ebc.pooling)
            return pooled if pinned is None else pinned.copy_(pooled)
        # per table: sums, the mean tables' divided by their bags' lengths
        pooled = F.embedding_bag(slots, ebc.values, offsets, mode="sum")
        div = ebc._divisors(offsets, slots.numel()).unsqueeze(1)
        return pooled.div_(div) if pinned is None else torch.div(pooled, div, out=pinned)

    @staticmethod
    def backward(ctx, g):
        ebc, slots, offsets = ctx.ebc, ctx.slots, ctx.offsets
        g = g.to("cpu", torch.float32)
        # each key adds its bag's gradient (divided by a mean bag's length)
        # into its row's slot, in key order: a scatter-add straight into
        # the daemon's slots, whatever g's strides, in one call
        w = ctx.weights
        div = ebc._grad_divisors(offsets, slots.numel()) if w is None else ctx.wdiv
        ebc.trainer.add_grads(slots.data_ptr(), slots.numel(),
                              0 if offsets is None else offsets.data_ptr(),
                              slots.numel() if offsets is None else offsets.numel(),
                              g.data_ptr(), g.stride(0), g.stride(1),
                              0 if div is None else div.data_ptr(),
                              0 if w is None else w.data_ptr())
        return torch.zeros(0), None, None, None, None


class _CacheRows(nn.Module):
    """What both modules share: the job's tables read from the node's cache
    (values) and trained through this trainer's gradient slots (grads,
    trainer.add_grads); features by name (names: those forward returns,
    _pick their table indices, None for all in order); device and the
    pinned host buffer a CUDA copy starts from."""

    def __init__(self, trainer, device, features, tables):
        super().__init__()
        info = trainer.info
        self.tables, self.dim = info["tables"], info["dim"]
        self.table_dims = list(getattr(trainer, "table_dims", [self.dim] * self.tables))
        self.features = _feature_names(features, self.tables)
        self._select(tables)
        self.dims = [self.table_dims[self.features.index(n)] for n in self.names]
        # model.dims: the columns of the (m, tables * dim) padded rows that
        # forward keeps (each table's first d_t); None when all are dim
        self._cols = None if all(d == self.dim for d in self.table_dims) else torch.cat(
            [torch.arange(d) + self.features.index(n) * self.dim
             for n, d in zip(self.names, self.dims)])
        self.device = torch.device(device) if device is not None else None
        self.values = torch.from_numpy(trainer.values)  # (capacity, dim): the cache
        self.grads = torch.from_numpy(trainer.grads)    # this trainer's gradient slots
        self.trainer = trainer  # backward adds into its slots (esd.Trainer.add_grads)
        self._anchor = torch.zeros(0, requires_grad=True)  # makes autograd call backward
        self._pinned = None
        _keep_freed_memory()

    def _select(self, tables):
        """The features forward returns: names (None: every table in order)."""
        self.names, self._pick = list(self.features), None
        if tables is None:
            return
        names = [str(n) for n in tables]
        for n in names:
            if n not in self.features:
                raise ValueError("tables: %s" % _unknown(n, self.features).args[0])
        if len(set(names)) != len(names) or not names:
            raise ValueError("tables: %r names a feature twice, or none" % (tables,))
        self.names = names
        if names != self.features:
            self._pick = torch.tensor([self.features.index(n) for n in names])

    def _out(self, n):
        """Where n pooled rows go: the pinned buffer (CUDA), else a new tensor."""
        pinned = self._pinned_out(n)
        return torch.empty(n, self.dim) if pinned is None else pinned

    def _pinned_out(self, n):
        """n rows of the pinned host buffer the CUDA copy starts from; None
        on the CPU."""
        if self.device is None or self.device.type != "cuda":
            return None
        if self._pinned is None or self._pinned.shape[0] < n:
            self._pinned = torch.empty(max(n, 1), self.dim).pin_memory()
        return self._pinned[:n]


class EmbeddingBagCollection(_CacheRows):
    """The job's embedding tables (one feature per table), read from and
    trained through the node's cache. pooling: "sum" or "mean" of a bag, or
    one of them per table (a list of `tables` modes); a bag of one id is
    its row either way. device: where the output goes (a CUDA device:
    gathered into pinned host memory, copied without blocking; gradients
    come back to the host).

    By name: features names the job's tables in table order (a list, or
    the stream's path: the names in its header; default "f0", "f1", ...);
    tables picks and orders the features the module returns (a list of
    names; an unknown or repeated name is a ValueError naming the job's
    features), and pooling may be a dict {name: "sum" | "mean"} (features
    not in it are summed). forward's output is then (m, len(tables), dim),
    to_dict's keys the tables' names.

    Not a holder of parameters: the rows live in the runtime, which applies
    the job's embedding optimizer (model.optimizer) at the commit."""

    def __init__(self, trainer, pooling="sum", device=None, features=None, tables=None):
        super().__init__(trainer, device, features, tables)
        if isinstance(pooling, dict):
            for f in pooling:
                if f not in self.features:
                    raise ValueError("pooling: %s" % _unknown(f, self.features).args[0])
            pooling = [pooling.get(f, "sum") for f in self.features]
        modes = [pooling] * self.tables if isinstance(pooling, str) else list(pooling)
        bad = [m for m in modes if m not in ("sum", "mean")]
        if bad or len(modes) != self.tables:
            raise ValueError("pooling must be 'sum', 'mean' or a list of them, one per table "
                             "(%d), not %r" % (self.tables, pooling))
        # one mode for all: F.embedding_bag's; else sums and a divisor per bag
        self.pooling = modes[0] if len(set(modes)) == 1 else "per-table"
        self._mean = None if len(set(modes)) == 1 else torch.tensor([m == "mean" for m in modes])

    def _divisors(self, offsets, nkeys):
        """Per bag (sample-major, table-minor): its length (at least 1) for a
        mean table, 1 for a sum table."""
        lens = torch.diff(offsets, append=torch.tensor([nkeys])).clamp(min=1)
        mean = self._mean.repeat(offsets.numel() // self.tables)
        return torch.where(mean, lens, torch.ones_like(lens)).to(torch.float32)

    def _pool_weighted(self, slots, offsets, weights):
        """Weighted bags: sum(w * row) of each bag (F.embedding_bag's
        per_sample_weights), a mean table's divided by its bag's weight sum
        (1 where that is 0). Returns (pooled, the divisors or None), the
        divisors for backward."""
        pooled = F.embedding_bag(slots, self.values, offsets, mode="sum",
                                 per_sample_weights=weights)
        div = None
        if self.pooling != "sum":
            nb = offsets.numel()
            lens = torch.diff(offsets, append=torch.tensor([slots.numel()]))
            bag = torch.repeat_interleave(torch.arange(nb), lens)
            sw = torch.zeros(nb, dtype=torch.float32).index_add_(0, bag, weights)
            sw = torch.where(sw == 0, torch.ones_like(sw), sw)
            if self._mean is not None:
                sw = torch.where(self._mean.repeat(nb // self.tables), sw, torch.ones_like(sw))
            div = sw.contiguous()
            pooled = pooled / div.unsqueeze(1)
        pinned = self._pinned_out(offsets.numel())
        return (pooled if pinned is None else pinned.copy_(pooled)), div

    def _grad_divisors(self, offsets, nkeys):
        """What backward divides each bag's gradient by: None (sums), a
        bag's length (at least 1) for a mean table, 1 for a sum table."""
        if offsets is None or self.pooling == "sum":
            return None
        if self._mean is None:  # mean everywhere
            return torch.diff(offsets, append=torch.tensor([nkeys])).clamp(min=1).to(
                torch.float32)
        return self._divisors(offsets, nkeys)

    def forward(self, batch, offsets=None, per_sample_weights=None):
        """(m, tables, dim) pooled rows of batch. offsets: bag starts into
        batch.slots flattened (m * tables of them, multi-hot); None: the
        batch's own (batch.offsets: a stream with bags), else one id per
        feature. per_sample_weights: a weight per key of slots (weighted
        bags, nn.EmbeddingBag's argument); None: the batch's own
        (batch.weights: a weighted stream), else none. A bag is then
        sum(w * row), a mean table's divided by sum(w), and each row's
        gradient is w times its bag's. batch: a Batch or a KeyedBatch.
        Configured with tables: (m, len(tables), dim), those features in
        that order."""
        batch = getattr(batch, "batch", batch)  # a KeyedBatch's Batch
        if offsets is None:
            offsets = getattr(batch, "offsets", None)
        if per_sample_weights is None:
            per_sample_weights = getattr(batch, "weights", None)
        slots = batch.slots.reshape(-1).to(torch.int64).contiguous()
        if offsets is not None:
            offsets = offsets.to(torch.int64).contiguous()
        w = None
        if per_sample_weights is not None:
            w = per_sample_weights.detach().to("cpu", torch.float32).reshape(-1).contiguous()
            if w.numel() != slots.numel():
                raise ValueError("per_sample_weights: %d weights for %d keys (one a key)"
                                 % (w.numel(), slots.numel()))
            if offsets is None:  # one id per feature: bags of one
                offsets = torch.arange(slots.numel(), dtype=torch.int64)
        out = _Lookup.apply(self._anchor, self, slots, offsets, w)
        if self.device is not None and self.device.type == "cuda":
            out = out.to(self.device, non_blocking=True)
        if self._cols is not None:  # model.dims: each feature its d_t, side by side
            return out.view(batch.m, self.tables * self.dim).index_select(
                1, self._cols.to(out.device))
        out = out.view(batch.m, self.tables, self.dim)
        if self._pick is not None:  # the named features: the others get no gradient
            out = out.index_select(1, self._pick.to(out.device))
        return out

    def to_dict(self, pooled):
        """{feature name: (m, dim)} of forward's output ((m, d_t) with
        model.dims)."""
        if self._cols is not None:
            return dict(zip(self.names, pooled.split(self.dims, dim=1)))
        return {f: pooled[:, t] for t, f in enumerate(self.names)}


class EmbeddingCollection(_CacheRows):
    """The job's tables unpooled, as TorchRec's EmbeddingCollection (for
    sequence features): forward(batch) is {feature name: Jagged} whose
    values are the (n, dim) rows ((n, d_t) with model.dims) of the feature's IDs, bag after bag, each
    ID its own row (an empty bag none), with the bags' lengths and offsets
    and the IDs' cache slots. Backward adds each row's gradient into its
    ID's gradient slot (IDs repeated in a micro-batch add up, in the
    batch's order: every slot belongs to one table). device, features and
    tables as EmbeddingBagCollection's: tables picks and orders the
    features forward returns, and only those are read.

    Not a holder of parameters: the rows live in the runtime, which applies
    the job's embedding optimizer (model.optimizer) at the commit."""

    def __init__(self, trainer, device=None, features=None, tables=None):
        super().__init__(trainer, device, features, tables)
        pick = self._pick if self._pick is not None else torch.arange(self.tables)
        # rank of each table in the output; the tables not returned last
        self._rank = torch.full((self.tables,), len(self.names), dtype=torch.int64)
        self._rank[pick] = torch.arange(len(self.names))
        self._pick_all = pick

    def _grad_divisors(self, offsets, nkeys):
        return None  # every row its own gradient

    def _layout(self, batch, slots, offsets):
        """(order, counts, lengths): the keys of the returned features,
        feature after feature in output order and in the batch's order
        within one; how many each feature has; and (m, len(names)) the
        lengths of its bags."""
        m, T = batch.m, self.tables
        if offsets is None:  # one ID a feature: (m, T) keys
            if slots.numel() != m * T:
                raise ValueError("EmbeddingCollection: %d slots for %d samples of %d tables"
                                 % (slots.numel(), m, T))
            order = torch.arange(m * T).view(m, T)[:, self._pick_all].t().reshape(-1)
            return (order, torch.full((len(self.names),), m, dtype=torch.int64),
                    torch.ones(m, len(self.names), dtype=torch.int64))
        if offsets.numel() != m * T:
            raise ValueError("EmbeddingCollection: %d bag offsets for %d samples of %d tables "
                             "(one bag a sample and table)" % (offsets.numel(), m, T))
        lens = torch.diff(offsets, append=torch.tensor([slots.numel()]))
        if (lens < 0).any() or (offsets.numel() and int(offsets[0]) != 0):
            raise ValueError("EmbeddingCollection: bag offsets must start at 0 and not "
                             "decrease or pass the %d keys" % slots.numel())
        rank = torch.repeat_interleave(self._rank.repeat(m), lens)
        counts = torch.bincount(rank, minlength=len(self.names) + 1)[:len(self.names)]
        order = torch.argsort(rank, stable=True)[:int(counts.sum())]
        return order, counts, lens.view(m, T)[:, self._pick_all]

    def forward(self, batch, offsets=None):
        """{name: Jagged} of batch's returned features (every table by
        default; tables= those, in that order): values (n, dim) rows,
        lengths (m,), offsets (m + 1,), slots (n,). offsets, batch: as
        EmbeddingBagCollection.forward's (a Batch or a KeyedBatch; bag
        starts, default the batch's own)."""
        batch = getattr(batch, "batch", batch)  # a KeyedBatch's Batch
        if offsets is None:
            offsets = getattr(batch, "offsets", None)
        slots = batch.slots.reshape(-1).to(torch.int64)
        if offsets is not None:
            offsets = offsets.to(torch.int64).contiguous()
        order, counts, lengths = self._layout(batch, slots, offsets)
        picked = slots.index_select(0, order)
        rows = _Lookup.apply(self._anchor, self, picked, None)  # one gather, feature-major
        if self.device is not None and self.device.type == "cuda":
            rows = rows.to(self.device, non_blocking=True)
        split = counts.tolist()
        return {f: Jagged(v[:, :d], lengths[:, i].contiguous(), s) for i, (f, v, s, d) in
                enumerate(zip(self.names, rows.split(split), picked.split(split), self.dims))}


class RowOptimizer:
    """The embedding side's optimizer step: step(loss) commits the batch
    the session handed out last (its row gradients, written by backward,
    and the loss for the daemon's log). zero_grad is the daemon's: it
    zeroes a batch's gradient slots before handing the batch out."""

    def __init__(self, session):
        self.session = session

    def zero_grad(self, set_to_none=False):
        pass

    def step(self, loss=None):
        b = self.session.current
        if b is None:
            raise RuntimeError("RowOptimizer.step: no batch handed out")
        self.session.trainer.commit(b.mb, 0.0 if loss is None else float(loss))
        self.session.current = None


def mlp(sizes, relu_last=False):
    """Linear layers of the given widths with a ReLU between two, and after
    the last too with relu_last=True (a hidden stack whose output feeds
    another layer, as TorchRec's MLP). The default ends in the last Linear:
    a 1-unit output layer gives logits of either sign."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if relu_last or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def bce(logits, batch):
    """Summed logistic loss of batch divided by the global batch: summed
    over the trainers (as DistributedDataParallel's sum hook and the
    runtime do), the loss and gradients of the whole iteration's batch."""
    return F.binary_cross_entropy_with_logits(logits, batch.labels,
                                              reduction="sum") / batch.global_k


def auc(scores, labels):
    """Area under the ROC curve of scores against 0/1 labels (ties count
    half); nan when one class is absent."""
    scores = np.asarray(scores, np.float64)
    labels = np.asarray(labels) > 0.5
    npos, nneg = int(labels.sum()), int((~labels).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    return float((r[labels].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))


class AucMeter:
    """AUC over every trainer's samples from histograms of the predicted
    probabilities (bins equal-width in [0, 1]: an exact AUC up to ties
    inside a bin), all-reduced so rank 0 sees the job's figure."""

    def __init__(self, bins=10000):
        self.bins = bins
        self.reset()

    def reset(self):
        self.hist = torch.zeros(2, self.bins, dtype=torch.float64)

    def add(self, logits, labels):
        p = torch.sigmoid(logits.detach().to("cpu", torch.float64))
        b = (p * self.bins).long().clamp_(0, self.bins - 1)
        y = (labels.detach().to("cpu") > 0.5).long()
        self.hist.view(-1).index_add_(0, y * self.bins + b, torch.ones(len(b), dtype=torch.float64))

    def value(self, reduce=True):
        h = self.hist.clone()
        if reduce and dist.is_initialized():
            dist.all_reduce(h)
        neg, pos = h[0], h[1]
        npos, nneg = float(pos.sum()), float(neg.sum())
        if npos == 0 or nneg == 0:
            return float("nan")
        below = torch.cumsum(neg, 0) - neg  # negatives in lower bins
        return float(((pos * (below + 0.5 * neg)).sum()) / (npos * nneg))


def _sum_hook(state, bucket):
    """DistributedDataParallel communication hook: the sum of the trainers'
    gradients (the default divides by the world size), by all-reduce."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _ordered_sum_hook(order, bucket):
    """The same sum, every element added in share order (order: the
    ranks, those of the first shares of the global batch first; None:
    rank order): each trainer's bucket gathered, then ((g0 + g1) + g2) +
    .... An all-reduce's order depends on where an element sits in the
    bucket, and DDP lays buckets out anew after the first iteration of
    every start: a job stopped and resumed would then differ from one
    never stopped in the last bits. So would one whose node's trainers
    took their daemon's indexes (their shares) in another order, were the
    sum in rank order. Costs (world - 1) bucket copies per trainer instead
    of two."""
    buf = bucket.buffer()
    parts = [torch.empty_like(buf) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, buf)
    order = order or list(range(len(parts)))
    total = parts[order[0]]
    for r in order[1:]:
        total += parts[r]
    fut = torch.futures.Future()
    fut.set_result(total)
    return fut


_malloc_tuned = False


def _keep_freed_memory():
    """Make glibc keep freed large blocks for reuse instead of returning
    them to the kernel: every step allocates its pooled rows and their
    gradient afresh (megabytes), and fresh mmap'd pages cost a fault each,
    as much as the gather itself. Process-wide, once."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 256 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):
        pass


TEARDOWN_S = 60  # an exit is CPU work: a loaded edge host stretches it to tens of seconds


def _leave_group():
    """Every trainer leaves together (rank 0 holds the group's store:
    nobody goes before all are done)."""
    dist.barrier()


def _keep_group():
    """Keep the gloo group's C++ object for the rest of the process: its
    destructor holds the GIL while it waits for gloo's worker threads,
    and a worker that drops its last tensors needs the GIL: once in a
    while neither goes on. DistributedDataParallel holds the group too,
    so that wait would come at the latest when the interpreter ends,
    beyond any bound a Python thread can keep. The process's exit ends
    gloo's threads instead."""
    import ctypes
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(dist.distributed_c10d._get_default_group()))


def _bound_exit(limit_s):
    """atexit: what is left of the interpreter's end (C++ destructors of
    torch included) at most limit_s seconds; past it, every thread's
    stack goes to stderr and the process exits 1 (faulthandler's
    watchdog: it needs no GIL)."""
    sys.stdout.flush()
    faulthandler.dump_traceback_later(limit_s, exit=True)


def _bounded_teardown(limit_s):
    """The last barrier, at most limit_s seconds: the training is over
    and committed, so a trainer caught in it (the group's store, rank 0's
    torchrun agent, gone) says so and exits 0 rather than wait forever.
    The group is then left without running gloo's teardown
    (_keep_group), and the rest of the process's end is bounded too
    (_bound_exit)."""
    import atexit
    import threading
    th = threading.Thread(target=_leave_group, daemon=True)
    th.start()
    th.join(limit_s)  # the barrier's wait releases the GIL
    if th.is_alive():
        print("esd.torch: the trainers' last barrier did not end in %d s; exiting (the "
              "job's work is committed)" % limit_s, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)
    _keep_group()
    dist.destroy_process_group()
    atexit.register(_bound_exit, limit_s)


def _share_order(info):
    """The ranks in the order of their shares of the global batch (node,
    then the trainer index the daemon gave: the order of attach, not the
    rank torchrun gave), gathered from every trainer."""
    mine = torch.tensor([info["rank"] * info["trainers"] + info["index"]], dtype=torch.int64)
    shares = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(shares, mine)
    return sorted(range(len(shares)), key=lambda r: int(shares[r]))


def _exit_on_failure(exc_type, exc, tb, _prev=[None]):  # noqa: B006 - the chained hook
    """sys.excepthook of a Session: the chained hooks tell the daemon and
    print the traceback, then the atexit handlers run and the process
    exits 1 at once, without the interpreter's teardown: a failed trainer
    has nothing left to do, and that teardown (freeing torch, its modules
    and the traceback's frames, which keep the gloo group alive) is long
    CPU work that runs before the group's sockets close, which is what
    tells the other trainers, waiting in a collective with this one, that
    it has gone. A KeyboardInterrupt ends as Python ends it, and an
    interactive interpreter (a prompt, python -i) goes on."""
    (_prev[0] or sys.__excepthook__)(exc_type, exc, tb)
    if not issubclass(exc_type, Exception) or hasattr(sys, "ps1") or sys.flags.interactive:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        import atexit
        atexit._run_exitfuncs()
    finally:
        os._exit(1)


def _exit_fast_on_failure():
    """Chain _exit_on_failure onto sys.excepthook, once per process."""
    if sys.excepthook is not _exit_on_failure:
        _exit_on_failure.__defaults__[0][0] = sys.excepthook
        sys.excepthook = _exit_on_failure


def _die_with_parent():
    """A trainer ends with the torchrun agent that started it: an agent
    that is killed leaves no trainer behind, blocked in a collective."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent is already gone
            os._exit(1)
    except (OSError, AttributeError):
        pass


def dense_path(node_dir, index=0, iteration=None):
    """Where trainer index of a node keeps the dense model: dense.pt in
    the node's directory (dense.I.pt for I > 0); that of checkpoint
    boundary ITERATION: dense@ITERATION.pt (dense.I@ITERATION.pt)."""
    base = "dense" if index == 0 else "dense.%d" % index
    at = "" if iteration is None else "@%d" % iteration
    return os.path.join(node_dir, base + at + ".pt")


def load_dense(node_dir, iteration, index=0, path=None, why=None):
    """(state, path): the dense model trainer index saved of iteration,
    from that checkpoint boundary's file, else from Session.save()'s file
    if it is of that iteration (only path, if given). Raises esd.EsdError
    naming the files and the iterations they hold; why opens the message
    (default: "a checkpoint is of iteration N"), which goes on "but the
    dense model of iteration N is missing: ..."."""
    tried = [path] if path else [dense_path(node_dir, index, iteration),
                                 dense_path(node_dir, index)]
    found = []
    for p in tried:
        if os.path.exists(p):
            s = torch.load(p)
            found.append("%s holds iteration %s" % (p, s.get("iteration")))
            if s.get("iteration") == iteration:
                return s, p
    raise esd.EsdError(2, "%s but the dense model of iteration %d is missing: %s"
                       % (why or "a checkpoint is of iteration %d" % iteration, iteration,
                          "; ".join(found) or " and ".join(tried) + " do not exist"))


class Session:
    """One trainer process of an ESD job, as torchrun starts it: attaches to
    its node's daemon ($ESD_NODE_DIR), joins the trainers' gloo group
    (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; GROUP_RANK must be
    the daemon's worker rank), seeds torch (seed: every trainer builds the
    same initial weights), and makes SIGTERM ask for a graceful stop of the
    job. Arguments default to the environment; timeout_s bounds every wait
    on the other trainers, so one that died fails the rest."""

    def __init__(self, node_dir=None, rank=None, world=None, init="env://", seed=1,
                 timeout_s=120, log_every=None, device=None):
        env = os.environ
        node_dir = node_dir or env.get("ESD_NODE_DIR")
        self.rank = int(env.get("RANK", -1)) if rank is None else rank
        self.world = int(env.get("WORLD_SIZE", 0)) if world is None else world
        if not node_dir or self.rank < 0 or self.world < 1:
            raise esd.EsdError(22, "esd.torch.Session: no node directory, rank or world "
                                   "(ESD_NODE_DIR, RANK, WORLD_SIZE: torchrun sets the "
                                   "last two)")
        _die_with_parent()
        faulthandler.register(signal.SIGUSR1)  # kill -USR1: every thread's stack
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        dist.init_process_group("gloo", init_method=init, rank=self.rank,
                                world_size=self.world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.trainer = esd.Trainer(node_dir)
        _exit_fast_on_failure()
        self.node_dir = node_dir
        info = self.trainer.info
        node = int(env.get("GROUP_RANK", info["rank"]))
        if info["rank"] != node or info["workers"] * info["trainers"] != self.world:
            raise esd.EsdError(22, "node %s is worker %d of %d with %d trainer(s) each, "
                                   "not node %d of a world of %d trainers"
                               % (node_dir, info["rank"], info["workers"],
                                  info["trainers"], node, self.world))
        signal.signal(signal.SIGTERM, lambda sig, frame: self.trainer.request_stop())
        self.info = info
        self._share_order = _share_order(info)
        self.tables, self.dim, self.ndense = info["tables"], info["dim"], info["dense"]
        self.dims = list(self.trainer.table_dims)  # each table's dim (model.dims)
        self.device = device
        self.current = None
        self.log_every = int(env.get("ESD_LOG_EVERY", 10)) if log_every is None else log_every
        self._meter = AucMeter()
        self._loss = torch.zeros(2, dtype=torch.float64)  # loss sum, iterations
        self._t0 = self._last = time.time()
        self._samples = 0
        self.iterations, self.last_iter = 0, -1
        self._restore = None
        self._dense = None  # (model, optimizer) saved at checkpoint boundaries
        self._boundaries = []  # the boundaries whose dense files are kept
        self.losses = []

    def embeddings(self, pooling="sum", features=None, tables=None):
        """The job's tables as an EmbeddingBagCollection; pooling: "sum",
        "mean", one of them per table or a dict by name; features, tables:
        by name (EmbeddingBagCollection). pooling "none" (or None): an
        EmbeddingCollection, each ID's row unpooled."""
        if pooling is None or (isinstance(pooling, str) and pooling == "none"):
            return EmbeddingCollection(self.trainer, self.device, features, tables)
        return EmbeddingBagCollection(self.trainer, pooling, self.device, features, tables)

    def distributed(self, model, deterministic=True):
        """model under DistributedDataParallel (gloo), gradients summed
        over the trainers; rank 0's initial weights go to every trainer.
        deterministic: sum in share order (gathers every trainer's
        gradients), so that a stopped and resumed job ends bit-identical to
        one never stopped; False: an all-reduce (less traffic for a large
        dense model, equal only to the last bits)."""
        ddp = DistributedDataParallel(model)
        if deterministic:
            ddp.register_comm_hook(self._share_order, _ordered_sum_hook)
        else:
            ddp.register_comm_hook(None, _sum_hook)
        return ddp

    def row_optimizer(self):
        return RowOptimizer(self)

    def fail(self, text):
        """Tell the daemon that this trainer fails, and why: it fails the
        whole job at once with text. An uncaught exception and a non-zero
        sys.exit are told without it (esd.Trainer's hooks)."""
        self.trainer.fail(text)

    def batches(self):
        """The node's micro-batches for this trainer, as Batch, until the
        job ends (or stops gracefully)."""
        for mb in self.trainer:
            if self._restore:
                self._restore_at(mb.iter)
            self.current = Batch(mb, self.device)
            yield self.current
            if self.current is not None:
                raise RuntimeError("batch %d was not committed (RowOptimizer.step)" % mb.iter)
            if mb.checkpoint and self._dense:  # the step of a boundary is done
                self._save_boundary(mb.iter)

    def progress(self, logits, batch, loss):
        """Count one step; every log_every iterations (and at the last)
        rank 0 prints the iteration, the window's mean global loss, AUC of
        the window's predictions (made before the step trained on them:
        progressive validation) and samples/s. The window's loss is the
        sum over trainers. Returns the global loss of this step."""
        self._meter.add(logits, batch.labels)
        step = torch.tensor([float(loss)], dtype=torch.float64)
        parts = [torch.empty_like(step) for _ in range(self.world)]
        dist.all_gather(parts, step)  # the iteration's loss, every trainer's share,
        gl = 0.0
        for r in self._share_order:  # summed in share order (as the gradients)
            gl += float(parts[r])
        self.losses.append(gl)
        self._loss[0] += gl
        self._loss[1] += 1
        self._samples += batch.global_k
        self.last_iter = batch.iter
        self.iterations += 1
        if self.log_every and self.iterations % self.log_every == 0:
            self._report()
        return gl

    def _report(self):
        a = self._meter.value()
        now = time.time()
        if self.rank == 0 and self._loss[1] > 0:
            print("iter %d loss %.5f auc %.4f samples/s %.0f"
                  % (self.last_iter, float(self._loss[0] / self._loss[1]), a,
                     self._samples / max(now - self._last, 1e-9)), flush=True)
        self._meter.reset()
        self._loss.zero_()
        self._samples, self._last = 0, now

    def dense_path(self, iteration=None):
        """Where this trainer keeps the dense model: dense.pt in its node
        directory (dense.I.pt for the node's trainer I > 0), local to its
        host like the node's part of a checkpoint; that of checkpoint
        boundary ITERATION: dense@ITERATION.pt (dense.I@ITERATION.pt)."""
        return dense_path(self.node_dir, self.info["index"], iteration)

    def _save_boundary(self, iteration, keep=2):
        """The dense state of checkpoint boundary iteration, beside the
        rows' checkpoint of it (a crashed job resumes from one of the last
        two, as the PS keeps them); older boundaries' files are removed."""
        model, optimizer = self._dense
        self.save(model, optimizer, self.dense_path(iteration))
        self._boundaries.append(iteration)
        for old in self._boundaries[:-keep]:
            try:
                os.remove(self.dense_path(old))
            except OSError:
                pass
        self._boundaries = self._boundaries[-keep:]

    def save(self, model, optimizer=None, path=None):
        """Write the dense model's (and optimizer's) state, the iteration it
        is of and the global losses so far with torch.save to path
        (default: dense_path()), atomically. Every trainer writes its own
        (the weights are the same on all): where the training stops, at
        its end or at a graceful stop, beside the runtime's checkpoint of
        the rows there (and, for the model restore() registered, at every
        checkpoint boundary: dense_path(iteration)). Returns the path."""
        if isinstance(model, DistributedDataParallel):
            model = model.module
        path = path or self.dense_path()
        state = {"model": model.state_dict(), "iteration": self.last_iter,
                 "iterations": self.iterations, "losses": self.losses}
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        return path

    def restore(self, model, optimizer=None, path=None, warm_start=None):
        """When the job resumes from a checkpoint (a job stopped, or
        crashed, and started again), load the dense state of that iteration
        into model (and optimizer) as the first batch arrives: the one
        saved at that checkpoint boundary (dense_path(iteration)), else
        save()'s file if it is of that iteration; a fresh job starts from
        the weights it has, or with warm_start (an export's directory, the
        job's ps.warm_start, or a file) from its dense.pt (the state_dict
        tools/esd-export --torch writes; the optimizer starts afresh, as
        the rows' state does). Registers model and optimizer to be saved at
        every checkpoint boundary. A resumed job without the dense model
        of its iteration is an error naming the files and both
        iterations; a warm start without its file, or one that does not
        fit the model, names the file."""
        if isinstance(model, DistributedDataParallel):
            model = model.module
        self._dense = (model, optimizer)
        self._restore = (model, optimizer, path, warm_start)

    def _warm_start(self, model, where):
        """Load an export's dense.pt into model (every trainer the same
        file, so every trainer the same weights)."""
        path = os.path.join(where, "dense.pt") if os.path.isdir(where) else where
        if not os.path.exists(path):
            raise esd.EsdError(2, "warm start: %s does not exist (tools/esd-export --torch "
                                  "NODE_DIR writes it beside the tables)" % path)
        state = torch.load(path)
        if isinstance(state, dict) and "model" in state and "iteration" in state:
            state = state["model"]  # a file of save(): its model's state
        try:
            model.load_state_dict(state)
        except (RuntimeError, KeyError, TypeError) as e:
            raise esd.EsdError(22, "warm start: %s does not fit the model: %s"
                               % (path, " ".join(str(e).split())[:300])) from e
        if self.rank == 0:
            print("warm started the dense model from %s" % path, flush=True)

    def _restore_at(self, first_iter):
        model, optimizer, path, warm = self._restore
        self._restore = None
        if first_iter <= 1:
            if warm:
                self._warm_start(model, warm)
            return
        want = first_iter - 1
        state, path = load_dense(self.node_dir, want, self.info["index"], path,
                                 "the job resumes after iteration %d" % want)
        model.load_state_dict(state["model"])
        if optimizer is not None and "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
        self.losses = list(state.get("losses", []))
        if self.rank == 0:
            print("resumed the dense model of iteration %d from %s" % (want, path),
                  flush=True)

    def close(self):
        # training is over: a SIGTERM from here on ends the process
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self._loss[1] > 0:
            self._report()
        el = time.time() - self._t0
        if self.rank == 0:
            print("done: %d iterations in %.2f s, final loss %.5f"
                  % (self.iterations, el, self.losses[-1] if self.losses else float("nan")),
                  flush=True)
        self.trainer.close()
        if dist.is_initialized():
            _bounded_teardown(TEARDOWN_S)
        sys.stdout.flush()
