"""tpusim.jit: a JAX function compiled once per argument signature and run on tpusim, with
its arguments and results kept in tpusim (tpusim.Array) and a simulated clock."""
import numpy as np

from ._buffer import Array
from ._core import Module
from ._hlotext import drop_empty_meshes


class Clock:
    """Simulated time on the chip: the sum of the step times of the runs it saw.
    seconds, cycles, steps; reset() starts it again. One clock may be shared by several
    jitted functions (a train step and an eval step on the same chip)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.seconds = 0.0
        self.cycles = 0
        self.steps = 0

    def add(self, report):
        """Advances by one run's step (a tpusim.Report)."""
        self.seconds += report.step_time_s
        self.cycles += report.cycles
        self.steps += 1

    def __repr__(self):
        return f"Clock({self.seconds:.6g} s simulated, {self.steps} steps)"


class jit:
    """Wraps fn as jax.jit does, but runs it on tpusim.

        step = tpusim.jit(train_step, chip="v5e", donate_argnums=(0,))
        params = tpusim.device_put(params)          # optional: NumPy/JAX leaves are copied in
        for x, y in batches:
            params, loss = step(params, x, y)       # params stay in tpusim between steps
        step.clock.seconds                          # simulated time of all the steps

    Each call flattens the arguments (pytrees of tpusim.Array, NumPy or JAX arrays and
    Python numbers), lowers fn for that signature once (jax.jit(fn, keep_unused=True)),
    runs it with the Array leaves read in place, and returns fn's output pytree with
    tpusim.Array leaves (kept in tpusim: pass them to the next call; np.asarray or
    .numpy() copies one out). donate_argnums: the Array leaves of these arguments are
    given up to the run (deleted after it, as JAX deletes donated arrays). Each run's step
    time is added to `clock` (a new Clock unless one is given); `last_report` is the
    latest run's tpusim.Report. chip, precision, backend, mesh, topology, slices and
    progress are tpusim.run's options.
    """

    def __init__(self, fn, *, chip="v5e", donate_argnums=(), precision=None, backend="tpu", mesh=None, topology=None,
                 slices=None, clock=None, progress=False):
        self.fn = fn
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        self.options = dict(chip=chip, precision=precision, backend=backend, mesh=mesh, topology=topology,
                            slices=slices)
        self.clock = clock if clock is not None else Clock()
        self.progress = progress
        self.last_report = None
        self._cache = {}
        self.__name__ = getattr(fn, "__name__", "fn")

    def lower(self, *args):
        """The tpusim.Module for these arguments (lowered once per signature), its output
        tree and the flat arguments."""
        import jax

        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (tree, tuple(_signature(x) for x in leaves))
        hit = self._cache.get(key)
        if hit is None:
            abstract = [jax.ShapeDtypeStruct(x.shape, x.dtype) if isinstance(x, Array) else x for x in leaves]
            lowered = jax.jit(self.fn, keep_unused=True).lower(*jax.tree_util.tree_unflatten(tree, abstract))
            try:  # with metadata: the profile names each op's JAX op and source line
                text = lowered.as_text(dialect="hlo", debug_info=True)
            except TypeError:  # a JAX without debug_info
                text = lowered.as_text(dialect="hlo")
            text = drop_empty_meshes(text)
            module = Module(text, name=f"jit({self.__name__})")
            if len(module.params) != len(leaves):
                raise ValueError(f"tpusim.jit: {len(leaves)} argument leaves but the lowered module takes "
                                 f"{len(module.params)} parameters")
            out_tree = lowered.out_tree
            hit = (module, out_tree)
            self._cache[key] = hit
        return hit[0], hit[1], leaves

    def __call__(self, *args):
        import jax

        module, out_tree, leaves = self.lower(*args)
        donate = []
        k = 0
        for i, a in enumerate(args):
            n = len(jax.tree_util.tree_leaves(a))
            if i in self.donate_argnums:
                donate += [j for j in range(k, k + n) if isinstance(leaves[j], Array)]
            k += n
        inputs = [x if isinstance(x, Array) else np.asarray(x, dtype=p.dtype if p is not None else None)
                  for x, p in zip(leaves, module.params)]
        outs, report = module.call(inputs, donate=donate, progress=self.progress, **self.options)
        self.last_report = report
        if report is not None:
            self.clock.add(report)
        return jax.tree_util.tree_unflatten(out_tree, outs)


def _signature(x):
    if isinstance(x, Array):
        return ("array", x.shape, str(x.dtype))
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return ("array", tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False)))
    return ("scalar", type(x).__name__)
