#!/usr/bin/env python3
"""megacore.py: "parallel" grid dimensions split over a megacore chip's TensorCores. The
Pallas guide's blocked matmul (bf16 2048^3, blocks of 512, an f32 scratch accumulator) with
dimension_semantics ("parallel", "parallel", "arbitrary") and with every dimension
"arbitrary", timed by tpusim (--mode timing) on v5e, v5p, v6e and v4 (v4 and v5p: two
TensorCores a chip; v5e and v6e: one).

    PYTHONPATH=python python3 bench/pallas/megacore.py        # jax needed (lowering)
"""
import os
import sys
sys.argv = sys.argv[:1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import user  # noqa: E402  (first: it sets the TPU environment)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import tpusim  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402


def mm(sem):
    def f(x, w):
        def kernel(x_ref, w_ref, o_ref, acc):
            @pl.when(pl.program_id(2) == 0)
            def _():
                acc[...] = jnp.zeros_like(acc)
            acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
            @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
            def _():
                o_ref[...] = acc[...].astype(o_ref.dtype)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16), grid=(4, 4, 4),
            in_specs=[pl.BlockSpec((512, 512), lambda i, j, k: (i, k)), pl.BlockSpec((512, 512), lambda i, j, k: (k, j))],
            out_specs=pl.BlockSpec((512, 512), lambda i, j, k: (i, j)), scratch_shapes=[pltpu.VMEM((512, 512), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=sem))(x, w)
    return f


args = [jnp.zeros((2048, 2048), jnp.bfloat16)] * 2
for sem in [("parallel", "parallel", "arbitrary"), ("arbitrary", "arbitrary", "arbitrary")]:
    t = user.lower(mm(sem), args)
    row = []
    for chip in ("v5e", "v5p", "v6e", "v4"):
        try:
            _, rep = tpusim.run(t, None, chip=chip, mode="timing")
            row.append("%s %.1fus" % (chip, rep.step_time_s * 1e6))
        except Exception as e:  # noqa: BLE001
            row.append("%s FAIL %s" % (chip, str(e)[:100]))
    print(sem, " ".join(row), flush=True)
