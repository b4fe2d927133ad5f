"""The report of the last program JAX ran on tpusim's PJRT plugin (JAX_PLATFORMS=tpusim).

    import tpusim.pjrt
    loss = train_step(params, x, y)          # any jitted or pmapped function
    rep = tpusim.pjrt.last_report()         # the JSON report as a dict (tpusim run --report)
    rep["step_time_s"], rep["mfu"]
    tpusim.pjrt.save_trace("step.trace.json")

See docs/pjrt.md.
"""
import ctypes
import json
import os
import tempfile

__all__ = ["last_report", "save_report", "save_trace", "executions"]


def _lib():
    try:
        from jax_plugins import tpusim as plugin
    except ImportError as e:  # the plugin module ships beside this package
        raise RuntimeError("tpusim.pjrt needs the jax_plugins.tpusim module (python/jax_plugins)") from e
    if plugin._lib is None:
        raise RuntimeError("the tpusim PJRT plugin is not loaded: run JAX with JAX_PLATFORMS=tpusim "
                           "and call a jitted function first")
    return plugin._lib


def executions():
    """(number of executions so far, name of the last program, e.g. "jit_train_step")."""
    name = ctypes.create_string_buffer(256)
    n = _lib().tpusim_pjrt_last_run(name, len(name))
    return int(n), name.value.decode()


def _write(what, path):
    err = ctypes.create_string_buffer(1200)
    if _lib().tpusim_pjrt_last_write(what, os.fspath(path).encode(), err, len(err)):
        raise RuntimeError(err.value.decode())


def save_report(path):
    """Writes the last execution's JSON report (the file `tpusim run --report` writes)."""
    _write(0, path)


def save_trace(path):
    """Writes the last execution's Chrome/Perfetto trace (as `tpusim run --trace`)."""
    _write(1, path)


def last_report():
    """The last execution's report as a dict: step time, cycles, FLOPs, MFU, the breakdown,
    the per-op profile and, for several chips, the pod section. Raises RuntimeError when
    nothing has run or the run was not timed (TPUSIM_BACKEND=ref)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="tpusim-report-")
    os.close(fd)
    try:
        _write(0, path)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)
