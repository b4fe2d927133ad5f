"""Host callbacks for the tpusim platform: jax.debug.print, jax.debug.callback,
jax.pure_callback and jax.experimental.io_callback.

Lowering (lowering.py) numbers each callback here and emits custom-call
"xla_ffi_python_cpu_callback" (the form JAX gives CPU callbacks) with that number as its index. When the executors reach it they
call `_run` (through the library hook tpusim_pjrt_set_host_callback) with the operands'
bytes; `_run` rebuilds the arrays, calls the primitive's implementation as JAX's CPU and TPU
runtimes do (on JAX's CPU device: JAX_PLATFORMS=tpusim,cpu, as a TPU program needs "cpu"
too; jax.debug.print alone also runs without it) and writes the results back. A callback that
raises fails the run with its message.
"""
import ctypes
import threading

import numpy as np

_lock = threading.Lock()
_entries = []  # number -> (primitive, params, operand avals, result avals)
_hook = None

HOST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
                           ctypes.c_int)


def register(prim, params, avals_in, avals_out):
    """Numbers a callback for the executors; the number goes into the program."""
    with _lock:
        _entries.append((prim, dict(params), tuple(avals_in), tuple(avals_out)))
        return len(_entries) - 1


def _no_cpu(e):
    return isinstance(e, RuntimeError) and "local CPU device" in str(e)


def _call(prim, params, args):
    """The primitive's implementation on NumPy arguments; a list of result arrays."""
    from jax._src import callback, debugging

    try:
        if prim is callback.pure_callback_p:
            return list(callback.pure_callback_impl(*args, **params))
        if prim is callback.io_callback_p:
            return list(callback.io_callback_impl(*args, **params))
        if prim is debugging.debug_callback_p:
            debugging.debug_callback_impl(*args, **params)
            return []
        if prim is debugging.debug_print_p:
            debugging.debug_print_impl(*args, **params)
            return []
    except RuntimeError as e:
        if not _no_cpu(e) or prim is not debugging.debug_print_p:
            raise  # JAX's own message: the callback needs the CPU device (JAX_PLATFORMS=tpusim,cpu)
    # jax.debug.print without JAX's CPU device: the message formatted on the NumPy arrays
    from functools import partial
    fn = partial(debugging._format_print_callback, params["fmt"], dict(params["np_printoptions"]),
                 params["has_placeholders"], params["logging_record"])
    debugging._make_flat_callback(params["in_tree"], fn, params["static_args"])(*args)
    return []


def _run(number, device, nin, ins, in_bytes, nout, outs, out_bytes, err, errlen):
    try:
        with _lock:
            if number >= len(_entries):
                raise RuntimeError("host callback number %d is not one this process lowered" % number)
            prim, params, avals_in, avals_out = _entries[number]
        arrays = [a for a in avals_in if hasattr(a, "shape") and hasattr(a, "dtype")]
        if len(arrays) != nin:
            raise RuntimeError("host callback given %d operands, lowered with %d" % (nin, len(arrays)))
        args = []
        for i, a in enumerate(arrays):
            dt = np.dtype(a.dtype)
            want = int(np.prod(a.shape, dtype=np.int64)) * dt.itemsize
            if in_bytes[i] != want:
                raise RuntimeError("operand %d of a host callback has %d bytes, %s needs %d" % (i, in_bytes[i], a, want))
            raw = ctypes.string_at(ins[i], want) if want else b""
            args.append(np.frombuffer(raw, dtype=dt).reshape(a.shape).copy())
        results = _call(prim, params, args)
        if len(results) != nout or len(results) != len(avals_out):
            raise RuntimeError("the callback returned %d values; it was declared with %d" % (len(results), len(avals_out)))
        for i, (r, a) in enumerate(zip(results, avals_out)):
            r = np.asarray(r)
            if r.shape != tuple(a.shape) or r.dtype != np.dtype(a.dtype):
                raise RuntimeError("result %d of the callback is %s%s; it was declared as %s%s"
                                   % (i, r.dtype, list(r.shape), np.dtype(a.dtype), list(a.shape)))
            b = np.ascontiguousarray(r).tobytes()
            if len(b) != out_bytes[i]:
                raise RuntimeError("result %d of the callback has %d bytes, the program's buffer %d"
                                   % (i, len(b), out_bytes[i]))
            if b:
                ctypes.memmove(outs[i], b, len(b))
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the run as its error
        msg = ("%s: %s" % (type(e).__name__, e)).replace("\n", " ").encode()[: max(errlen - 1, 0)]
        ctypes.memmove(err, msg + b"\0", len(msg) + 1)
        return 1


def install(lib):
    """Sets the library's host-callback hook to `_run` (once)."""
    global _hook
    if _hook is None:
        lib.tpusim_pjrt_set_host_callback.argtypes = [HOST_FN]
        lib.tpusim_pjrt_set_host_callback.restype = None
        _hook = HOST_FN(_run)
        lib.tpusim_pjrt_set_host_callback(_hook)
