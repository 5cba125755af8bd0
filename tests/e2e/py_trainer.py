"""A numpy trainer through the Python binding, for the binding's test: it
checks the views are zero-copy (the same addresses libesd reports, values
read-only, gradients writable), the bag offsets of a stream without bags
(the identity), the checkpoint boundaries flagged every argv[2]
iterations, writes zero gradients and commits."""
import ctypes
import sys

import numpy as np

import esd

t = esd.Trainer(sys.argv[1])
i = t._info
assert t.values.ctypes.data == i.values_base, "values view is not the shared rows"
assert t.grads.ctypes.data == i.grads_base, "grads view is not the shared gradient slots"
assert not t.values.flags.writeable and t.grads.flags.writeable
assert t.values.shape == (i.capacity, i.dim) and t.values.strides[0] == i.value_stride
every = int(sys.argv[2]) if len(sys.argv) > 2 else 0
n = 0
for mb in t:
    assert mb.nkeys == mb.m * i.tables and (mb.bag_off == np.arange(mb.m * i.tables + 1)).all()
    assert mb.checkpoint == (every > 0 and mb.iter % every == 0), \
        "iteration %d flagged %s, checkpoint every %d" % (mb.iter, mb.checkpoint, every)
    rows = t.values[mb.slots]                    # (m, tables, dim) gather
    assert rows.shape == (mb.m, mb.slots.shape[1], i.dim)
    # the daemon zeroed the gradient slots of this micro-batch
    assert not t.grads[np.unique(mb.slots)].any()
    t.grads[mb.slots.reshape(-1)] = 0.0
    t.commit(mb, 0.0)
    n += 1
print("python trainer: %d micro-batches" % n)
