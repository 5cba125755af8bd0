"""Python binding of libesd: train from Python (numpy, PyTorch) on an ESD node.

A trainer attaches to its node daemon, receives micro-batches, reads the
embedding rows of the micro-batch in place from the node's shared memory
(zero copy: numpy views, torch.from_numpy on them shares the memory) and
writes the rows' gradients in place, then commits.

    import esd
    t = esd.Trainer("/run/esd/node0")
    for mb in t:                       # ends when the daemon says training is over
        rows = t.values[mb.slots]      # (m, tables, dim) float32 (a gather: a copy)
        ...
        np.add.at(t.grads, mb.slots, g)  # gradients, in place
        t.commit(mb, loss)

t.values and t.grads are views of every cache slot: (capacity, dim)
float32; values are read-only. Normalise losses by mb.global_k.

Bags (multi-hot features, docs/multihot.md): on a stream with bags
(t.info["bags"] == 1) mb.slots and mb.keys are flat (nkeys,) arrays, bag
by bag, and mb.bag_off (m * tables + 1,) says where bag (i, t) starts;
without bags mb.slots keeps its (m, tables) shape and mb.bag_off is the
identity. On a weighted stream (t.info["weighted"] == 1) mb.weights is the
(nkeys,) float32 weight of each key (None otherwise).

A trainer that fails tells its daemon why, and the daemon fails the job
at once with that text: an uncaught exception (sys.excepthook, chained:
the exception's type, message and where it was raised), a non-zero
sys.exit(n), an exception leaving a `with Trainer(...)` block, or
t.fail(text) called by the script itself. libesd does the same for a
fatal signal (SIGSEGV, SIGABRT, ...) and keeps sending heartbeats from a
thread of its own, so a step that holds the GIL for long is not taken for
a hung trainer.

The shared library is found through $ESD_LIB, then next to this package
in the build tree (build/lib/libesd.so), then where the package installs
it (lib/<multiarch>/libesd.so beside lib/python3/dist-packages), then the
system's loader path.
"""
import ctypes
import ctypes.util
import errno
import os
import sys
import sysconfig
import traceback
import weakref

import numpy as np

__all__ = ["Trainer", "MicroBatch", "EsdError", "describe"]


class EsdError(OSError):
    pass


class _Info(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_uint32), ("workers", ctypes.c_uint32),
                ("index", ctypes.c_uint32), ("trainers", ctypes.c_uint32),
                ("dim", ctypes.c_uint32), ("tables", ctypes.c_uint32),
                ("dense", ctypes.c_uint32), ("dense_params", ctypes.c_uint32),
                ("max_batch", ctypes.c_uint32), ("capacity", ctypes.c_uint32),
                ("values_base", ctypes.c_void_p), ("grads_base", ctypes.c_void_p),
                ("value_stride", ctypes.c_size_t), ("grad_stride", ctypes.c_size_t),
                ("max_keys", ctypes.c_uint32), ("bags", ctypes.c_uint32),
                ("weighted", ctypes.c_uint32)]


class _MB(ctypes.Structure):
    _fields_ = [("iter", ctypes.c_uint64), ("m", ctypes.c_uint32),
                ("tables", ctypes.c_uint32), ("global_k", ctypes.c_uint64),
                ("slots", ctypes.c_void_p), ("keys", ctypes.c_void_p),
                ("labels", ctypes.c_void_p), ("dense", ctypes.c_void_p),
                ("params", ctypes.c_void_p), ("dgrad", ctypes.c_void_p),
                ("nkeys", ctypes.c_uint32), ("bag_off", ctypes.c_void_p),
                ("flags", ctypes.c_uint32), ("weights", ctypes.c_void_p)]


def _load():
    cands = []
    if os.environ.get("ESD_LIB"):
        cands.append(os.environ["ESD_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    for up in ("../../../build/lib", "../../../../build/lib", "../../lib", "../lib"):
        cands.append(os.path.normpath(os.path.join(here, up, "libesd.so")))
    # installed (the .deb): PREFIX/lib/python3/dist-packages/esd next to
    # PREFIX/lib/<multiarch>/libesd.so, wherever PREFIX is
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    cands.append(os.path.normpath(os.path.join(here, "../../..", arch, "libesd.so")))
    found = ctypes.util.find_library("esd")
    if found:
        cands.append(found)
    for c in cands:
        if os.path.exists(c) or c == found:
            lib = ctypes.CDLL(c)
            break
    else:
        raise EsdError("libesd.so not found (set ESD_LIB); looked in: " + ", ".join(cands))
    lib.esd_trainer_attach.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.esd_trainer_attach_wait.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_void_p)]
    lib.esd_trainer_request_stop.argtypes = [ctypes.c_void_p]
    lib.esd_trainer_get_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Info)]
    lib.esd_trainer_table_dims.argtypes = [ctypes.c_void_p]
    lib.esd_trainer_table_dims.restype = ctypes.POINTER(ctypes.c_uint32)
    lib.esd_trainer_next.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_MB)]
    lib.esd_trainer_commit.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MB), ctypes.c_double]
    lib.esd_trainer_detach.argtypes = [ctypes.c_void_p]
    lib.esd_trainer_fail.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.esd_trainer_add_grads.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                          ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_void_p]
    lib.esd_trainer_add_grads_w.argtypes = lib.esd_trainer_add_grads.argtypes + [
        ctypes.c_void_p]
    return lib


# The trainers of this process that an uncaught exception or a non-zero
# exit reports to (weak: a closed or collected trainer is not told).
_attached = weakref.WeakSet()
_hooks_installed = False
FAIL_TEXT_MAX = 200  # the daemon and the shards quote it in one line


def describe(exc_type, exc, tb):
    """One line for the daemon: the exception's type and message, and where
    it was raised (the innermost frame: file, line, function, code)."""
    text = "%s: %s" % (exc_type.__name__, exc) if str(exc) else exc_type.__name__
    frames = traceback.extract_tb(tb) if tb is not None else []
    if frames:
        f = frames[-1]
        text += " (at %s:%d in %s%s)" % (os.path.basename(f.filename), f.lineno, f.name,
                                          ": " + f.line.strip() if f.line else "")
    text = " ".join(text.split())
    return text if len(text) <= FAIL_TEXT_MAX else text[:FAIL_TEXT_MAX - 3] + "..."


def _tell_all(text):
    for t in list(_attached):
        try:
            t.fail(text)
        except Exception:  # noqa: BLE001 - the process ends anyway
            pass


def _excepthook(exc_type, exc, tb, _prev=[None]):  # noqa: B006 - the chained hook
    if not issubclass(exc_type, SystemExit):
        _tell_all(describe(exc_type, exc, tb))
    (_prev[0] or sys.__excepthook__)(exc_type, exc, tb)


def _install_hooks():
    """sys.excepthook (chained) and sys.exit report to the attached
    trainers; once per process."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    _excepthook.__defaults__[0][0] = sys.excepthook
    sys.excepthook = _excepthook
    real_exit = sys.exit

    def exit_and_tell(status=None):
        if status not in (None, 0):
            _tell_all("exited with status %s" % (status,) if isinstance(status, int)
                      else "exited: %s" % (status,))
        real_exit(status)
    sys.exit = exit_and_tell


_lib = None


def _view(addr, count, dtype, shape, writable):
    """A numpy array over count items of dtype at addr (no copy)."""
    nbytes = count * np.dtype(dtype).itemsize
    buf = (ctypes.c_char * max(nbytes, 1)).from_address(addr)
    a = np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)
    a.flags.writeable = writable
    return a


def _strided(addr, rows, stride, dim, writable):
    count = ((rows - 1) * stride) // 4 + dim if rows else 0
    base = _view(addr, count, np.float32, (count,), writable)
    return np.lib.stride_tricks.as_strided(base, shape=(rows, dim), strides=(stride, 4),
                                           writeable=writable)


class MicroBatch:
    """One micro-batch; arrays are views into the exchange area, valid until
    the next one is received."""

    def __init__(self, raw, info):
        self._raw = raw
        self.iter = raw.iter
        self.m = raw.m
        self.global_k = raw.global_k
        self.checkpoint = bool(raw.flags & 1)  # a checkpoint boundary (ESD_MB_CHECKPOINT)
        self.tables = raw.tables
        T, m, n = info.tables, raw.m, raw.nkeys
        self.nkeys = n
        shape = (n,) if info.bags else (m, T)
        self.slots = _view(raw.slots, n, np.uint32, shape, False)
        self.keys = _view(raw.keys, n, np.uint64, shape, False)
        self.bag_off = _view(raw.bag_off, m * T + 1, np.uint32, (m * T + 1,), False)
        # a weighted stream (docs/multihot.md): each key's weight, parallel to slots
        self.weights = _view(raw.weights, n, np.float32, (n,), False) if raw.weights else None
        self.labels = _view(raw.labels, m, np.float32, (m,), False)
        self.dense = _view(raw.dense, m * info.dense, np.float32, (m, info.dense), False)
        self.params = _view(raw.params, info.dense_params, np.float32,
                            (info.dense_params,), False)
        self.dgrad = _view(raw.dgrad, info.dense_params, np.float32,
                           (info.dense_params,), True)


class Trainer:
    def __init__(self, node_dir, wait_s=30.0):
        """Attach to the daemon of node_dir, waiting up to wait_s seconds
        for it to listen on node_dir/esdd.sock (a trainer started beside
        its daemon)."""
        global _lib
        if _lib is None:
            _lib = _load()
        self._h = ctypes.c_void_p()
        sock = os.path.join(node_dir, "esdd.sock")
        rc = _lib.esd_trainer_attach_wait(node_dir.encode(), int(wait_s * 1000),
                                          ctypes.byref(self._h))
        if rc:
            raise EsdError(-rc, "cannot attach to the daemon on %s (waited up to %.0f s): %s"
                           % (sock, wait_s, os.strerror(-rc)))
        _install_hooks()
        _attached.add(self)
        self._info = _Info()
        _lib.esd_trainer_get_info(self._h, ctypes.byref(self._info))
        i = self._info
        self.info = {f: getattr(i, f) for f, _ in _Info._fields_ if "base" not in f}
        # each table's dim (model.dims; info["dim"] for all without it): a
        # table-t row is the first table_dims[t] floats of its slot
        d = _lib.esd_trainer_table_dims(self._h)
        self.table_dims = [int(d[t]) for t in range(i.tables)]
        self.values = _strided(i.values_base, i.capacity, i.value_stride, i.dim, False)
        self.grads = _strided(i.grads_base, i.capacity, i.grad_stride, i.dim, True)

    def next(self, timeout_ms=-1):
        """The next MicroBatch, or None when training is over."""
        raw = _MB()
        rc = _lib.esd_trainer_next(self._h, timeout_ms, ctypes.byref(raw))
        if rc == 1:
            return None
        if rc == -errno.EHOSTDOWN:
            raise EsdError(-rc, "waiting for a micro-batch: the daemon sent nothing, not even "
                           "a heartbeat, for job.peer_timeout_ms (stopped or hung)")
        if rc:
            raise EsdError(-rc, "waiting for a micro-batch: " + os.strerror(-rc))
        return MicroBatch(raw, self._info)

    def __iter__(self):
        while True:
            mb = self.next()
            if mb is None:
                return
            yield mb

    def commit(self, mb, loss=0.0):
        rc = _lib.esd_trainer_commit(self._h, ctypes.byref(mb._raw), float(loss))
        if rc:
            raise EsdError(-rc, "commit: " + os.strerror(-rc))

    def add_grads(self, slots, nkeys, offsets, nbags, g, row_stride, col_stride, div=None,
                  weights=None):
        """Add pooled gradients into the rows' gradient slots, key by key
        in order (esd_trainer_add_grads; esd.torch's backward): every key
        of bag b adds g's row b (divided by div[b], if given) to its slot's
        gradient. Arguments are addresses (a numpy array's
        ctypes.data, a torch tensor's data_ptr()): slots and offsets int64
        (offsets None or 0: every key a bag of its own), g and div
        float32, g's strides in floats; weights (float32, one a key:
        weighted bags, esd_trainer_add_grads_w) multiply each key's row.
        Raises IndexError for a slot outside the cache, ValueError for bad
        offsets; adds nothing then."""
        if not self._h:
            raise EsdError(errno.EBADF, "add_grads: the trainer is closed")
        if weights:
            rc = _lib.esd_trainer_add_grads_w(self._h, slots, nkeys, offsets or None, nbags, g,
                                              row_stride, col_stride, div or None, weights)
        else:
            rc = _lib.esd_trainer_add_grads(self._h, slots, nkeys, offsets or None, nbags, g,
                                            row_stride, col_stride, div or None)
        if rc == -errno.ERANGE:
            raise IndexError("add_grads: a slot among the %d keys is outside the cache (slots "
                             "0 .. %d)" % (nkeys, self._info.capacity - 1))
        if rc:
            raise ValueError("add_grads: offsets of %d bags over %d keys must start at 0, "
                             "not decrease and not pass the keys (%s)"
                             % (nbags, nkeys, os.strerror(-rc)))

    def request_stop(self):
        """Ask for a graceful stop of the whole job (what a trainer does on
        SIGTERM): training goes on to a checkpoint boundary a few iterations
        later, then next() returns None."""
        rc = _lib.esd_trainer_request_stop(self._h)
        if rc:
            raise EsdError(-rc, "stop request: " + os.strerror(-rc))

    def fail(self, text):
        """Tell the daemon that this trainer fails, and why: it fails the
        whole job at once with text (what the excepthook sends for an
        uncaught exception)."""
        if self._h:
            _lib.esd_trainer_fail(self._h, str(text).encode("utf-8", "replace")[:511])

    def close(self):
        _attached.discard(self)
        if self._h:
            _lib.esd_trainer_detach(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, (SystemExit, GeneratorExit)):
            self.fail(describe(exc_type, exc, tb))
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
