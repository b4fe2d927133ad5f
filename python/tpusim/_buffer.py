"""Arrays kept in tpusim between runs (tpu_sim_buffer): tpusim.Array, device_put, and
Module.call, which runs on them and returns its outputs as Arrays."""
import ctypes

import numpy as np

from . import _lib
from ._core import _Progress, _fill_array, _np_dtype, _to_numpy, _NAMES
from ._lib import TpusimError
from ._report import Report


class Array:
    """An array held by tpusim (a tpu_sim_buffer): a run's output that the next run reads
    in place, without a copy through NumPy. shape, dtype (NumPy; bf16 as
    ml_dtypes.bfloat16), hlo_dtype, nbytes; np.asarray(a) or a.numpy() copies it out.
    Donating it to a run (donate= / donate_argnums=) deletes it: is_deleted() is then True
    and reading it raises TpusimError."""

    __array_priority__ = 100

    def __init__(self, handle):
        self._h = handle
        self._free = _lib.lib().tpu_sim_buffer_free
        a = self._struct()
        self.shape = tuple(a.dims[k] for k in range(a.rank))
        self._code = a.dtype
        self.dtype = _np_dtype(a.dtype)
        self.hlo_dtype = _NAMES[a.dtype]
        self.nbytes = a.nbytes

    def _struct(self):
        if not self._h:
            raise TpusimError("error: the array was deleted", "TPU_ERR_ARG")
        a = _lib.Array()
        d = _lib.Diag()
        _lib.check(_lib.lib().tpu_sim_buffer_array(self._h, ctypes.byref(a), ctypes.byref(d)), d)
        return a

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._free(h)
            self._h = None

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def is_deleted(self):
        """True once the array was donated to a run or deleted."""
        return not self._h or bool(_lib.lib().tpu_sim_buffer_donated(self._h))

    def delete(self):
        """Releases the array's memory now."""
        if self._h:
            self._free(self._h)
            self._h = None

    def numpy(self):
        """A NumPy copy of the array (a copy: the array may be donated later)."""
        return _to_numpy(self._struct(), self, copy=True)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        return self.numpy().item()

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tpusim.Array")
        return self.shape[0]

    def __repr__(self):
        if self.is_deleted():
            return f"tpusim.Array({self.hlo_dtype}{list(self.shape)}, deleted)"
        return f"tpusim.Array({np.array2string(self.numpy(), threshold=20)}, dtype={self.hlo_dtype})"


def _new_buffer(x, i=0, param=None):
    """A fresh tpu_sim_buffer holding a copy of x (anything tpusim.run takes)."""
    s = _lib.Array()
    keep = _fill_array(s, x, i, param)
    h = ctypes.c_void_p()
    d = _lib.Diag()
    with _lib.LOCK:
        st = _lib.lib().tpu_sim_buffer_new(ctypes.byref(s), ctypes.byref(h), ctypes.byref(d))
    del keep
    _lib.check(st, d)
    return h


def device_put(x):
    """Copies x into tpusim: an Array for an array (NumPy, JAX, a Python number); for a
    pytree (dicts, lists, tuples; with JAX installed), the same tree with Arrays as leaves,
    as jax.device_put does. An Array is returned as it is."""
    if isinstance(x, Array):
        return x
    if hasattr(x, "dtype") or isinstance(x, (int, float, complex, bool)):
        return Array(_new_buffer(x))
    try:
        import jax
    except ImportError:
        return Array(_new_buffer(x))
    return jax.tree_util.tree_map(lambda leaf: device_put(leaf), x, is_leaf=lambda leaf: isinstance(leaf, Array))


def call_module(m, o, inputs, donate, progress):
    """Module.call: runs m on inputs as buffers (Arrays in place; anything else copied into
    a buffer of its own, donated since nothing else holds it)."""
    L = _lib.lib()
    inputs = list(inputs)
    n = len(inputs)
    donate = set(int(i) for i in (donate or ()))
    for i in donate:
        if not 0 <= i < n:
            raise TpusimError(f"error: donate: input {i} does not exist (the call has {n})", "TPU_ERR_ARG")
    bufs = (ctypes.c_void_p * max(1, n))()
    flags = (ctypes.c_int * max(1, n))()
    temps = []  # buffers made here, freed after the run
    donated = []
    try:
        for i, x in enumerate(inputs):
            if isinstance(x, Array):
                if not x._h:
                    raise TpusimError(f"error: input {i}: the array was deleted", "TPU_ERR_ARG")
                bufs[i] = x._h
                if i in donate:
                    flags[i] = 1
                    donated.append(x)
            else:
                h = _new_buffer(x, i, m.params[i] if i < len(m.params) else None)
                temps.append(h)
                bufs[i] = h
                flags[i] = 1
        r = ctypes.c_void_p()
        d = _lib.Diag()
        bar = _Progress(progress, m.name)
        with _lib.LOCK:
            if bar.active:
                L.tpu_sim_set_progress(bar.fn, None)
            try:
                st = L.tpu_sim_run_buffers(m._h, ctypes.byref(o), bufs, n, flags, ctypes.byref(r), ctypes.byref(d))
            finally:
                if bar.active:
                    L.tpu_sim_set_progress(_lib.PROGRESS_FN(), None)
                    bar.close()
    finally:
        for h in temps:
            L.tpu_sim_buffer_free(h)
    _lib.check(st, d)
    from ._core import _Result

    res = _Result(r)
    for x in donated:  # its memory went with the run: nothing is left but the handle
        x.delete()
    outs = []
    for i in range(L.tpu_sim_result_noutputs(r)):
        a = _lib.Array()
        d = _lib.Diag()
        _lib.check(L.tpu_sim_result_output(r, i, ctypes.byref(a), ctypes.byref(d)), d)
        if a.dtype < 0:  # a token
            outs.append(None)
            continue
        h = ctypes.c_void_p()
        with _lib.LOCK:
            st = L.tpu_sim_result_take_output(r, i, ctypes.byref(h), ctypes.byref(d))
        _lib.check(st, d)
        outs.append(Array(h))
    report = Report(res, m.name) if L.tpu_sim_result_timed(r) else None
    return outs, report
