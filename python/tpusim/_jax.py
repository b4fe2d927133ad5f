"""tpusim.simulate: lower a JAX function to HLO, run it on tpusim, return JAX's pytree."""
import numpy as np

from ._core import Module
from ._hlotext import drop_empty_meshes


def _lower_for_tpu(jfn, args, chip):
    """jfn lowered for a TPU platform on this host (its Pallas kernels become tpu_custom_calls
    that tpusim decodes). Kernels that ask the TPU's kind while lowering get the chip's, with
    libtpu's compile-only topology where it is installed."""
    import jax

    def lower():
        return jfn.trace(*args).lower(lowering_platforms=("tpu",))
    try:
        return lower()
    except ValueError as e:
        if "Unsupported TPU device kind" not in str(e):
            raise
        from jax.experimental import topologies
        names = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "v4": "v4:2x2x1"}
        name = names.get(chip if isinstance(chip, str) else "v5e", "v5e:2x2")
        dev = topologies.get_topology_desc(platform="tpu", topology_name=name).devices[0]
        with jax.default_device(dev):
            return lower()


def simulate(fn, *args, chip="v5e", topology=None, mesh=None, precision=None, mode="full", backend="tpu", slices=None,
             progress=None):
    """Runs fn(*args) on a simulated TPU.

    fn is lowered with jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo",
    debug_info=True) (the metadata gives each profiled op its JAX name and source line),
    (a function holding a Pallas TPU kernel, which lowers only for a TPU, is lowered with
    lowering_platforms=("tpu",)), so args are what jax.jit takes: arrays (NumPy or JAX), Python numbers, and pytrees of
    them (no static arguments: close over them, e.g. with functools.partial). Returns
    (outputs, report): outputs the same pytree of NumPy arrays fn returns under JAX (None in
    timing mode); bf16 leaves come back as ml_dtypes.bfloat16 (JAX installs it). report is a
    tpusim.Report (None with backend="ref").

    Arguments sharded over a jax.sharding.Mesh (jax.device_put with a NamedSharding) make
    a sharded program: tpusim partitions it over the mesh's chips (docs/spmd.md) and
    returns global arrays; mesh ("x=2,y=4" or {"x": 2, "y": 4}) overrides the mesh the
    lowered text names. topology ("v5p-256", "4x4x8") and slices time the collectives on
    that slice (see tpusim.run).
    """
    import jax

    jfn = jax.jit(fn, keep_unused=True)
    try:
        lowered = jfn.lower(*args)
    except ValueError as e:  # a Pallas TPU kernel (pallas_call) lowers only for a TPU
        if "interpret mode" not in str(e):
            raise
        lowered = _lower_for_tpu(jfn, args, chip)
    try:  # with metadata: the profile names each op's JAX op and source line
        text = lowered.as_text(dialect="hlo", debug_info=True)
    except TypeError:  # a JAX without debug_info
        text = lowered.as_text(dialect="hlo")
    text = drop_empty_meshes(text)
    name = getattr(fn, "__name__", "fn")
    m = Module(text, name=f"jit({name})")
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(fn, *args))
    inputs = None
    if mode != "timing":
        leaves = jax.tree_util.tree_leaves(args)
        if len(leaves) != len(m.params):
            raise ValueError(f"simulate: {len(leaves)} argument leaves but the lowered module takes {len(m.params)} "
                             "parameters")
        # As jax.jit does: each leaf in the parameter's dtype (Python numbers, float64
        # arrays without jax_enable_x64).
        inputs = [np.asarray(x, dtype=p.dtype) if p is not None else np.asarray(x) for x, p in zip(leaves, m.params)]
    outputs, report = m.run(inputs, backend=backend, chip=chip, precision=precision, mode=mode, mesh=mesh,
                            topology=topology, slices=slices, progress=progress)
    if outputs is not None:
        outputs = jax.tree_util.tree_unflatten(out_tree, outputs)
    return outputs, report
