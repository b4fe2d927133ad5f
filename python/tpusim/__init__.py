"""tpusim: run JAX/XLA programs on a simulated TPU from Python.

    outputs, report = tpusim.simulate(f, x, w, chip="v5e")    # a JAX function
    outputs, report = tpusim.run("model.hlo", [x, w])         # HLO text or a path
    step = tpusim.jit(train_step, chip="v5e", donate_argnums=0)  # arrays stay in tpusim

See docs/python.md in the repository.
"""
from ._lib import TpusimError
from ._core import Module, Param, cache_clear, cache_info, load, run, set_cache_size
from ._report import Report
from ._jax import simulate
from ._buffer import Array, device_put
from ._jit import Clock, jit


def version():
    """The C library's version."""
    from . import _lib

    return _lib.lib().tpu_version().decode()


__version__ = "0.1.0"
__all__ = ["Array", "Clock", "TpusimError", "Module", "Param", "Report", "cache_clear", "cache_info", "device_put",
           "jit", "load", "run", "set_cache_size", "simulate", "version"]
