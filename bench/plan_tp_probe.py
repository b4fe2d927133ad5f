#!/usr/bin/env python3
"""plan_tp_probe.py: how the XLA TPU compiler (libtpu, compile-only) schedules MaxText's
tensor-parallel collectives when the activations are split as MaxText splits them (its
`activation_embed` rule: the residual stream's d_model over the tensor axis), under MaxText's
v5p flags (bench/plan_xla.py MAXTEXT_FLAGS). The planner's program keeps the residual whole and
all-reduces after the output projection and the MLP (docs/plan.md, "Tensor-parallel
collectives"); MaxText's all-gathers before the matmuls that read the residual and
reduce-scatters after those that write it. This prints, in the compiler's order, the
collectives and the matmul kernels of one JAX-written SwiGLU MLP block (forward and gradient,
two layers sharing weights) on a mesh fsdp x tensor of v5p chips: which collectives stay
synchronous, which become rings of collective-permutes with a partial matmul per step
(a windowed einsum), with the compiler's estimated cycles of each kernel.

    nice python3 bench/plan_tp_probe.py [--fsdp 16] [--tensor 4] [--batch 6] [--seq 2048]
                                        [--d 8192] [--mlp 28672] [--flags maxtext|none]

Session 11, v5p 4x4x4, 1x16x4, MaxText 32B's MLP shapes (per-chip batch 6): the reduce-scatter
after the MLP's down projection becomes a bidirectional ring of collective-permutes beside four
partial matmuls (likewise the transposed up projection in the backward); the all-gathers of
the split residual before the up projection stay synchronous (their async form converted
back). Compiling takes about a minute.

Session 14, --block parallel (v5p 4x4x4, fsdp 4 x tensor 16, batch 2, d 20480, MLP 65536, the
512B row's shapes; the second branch x . wq, tanh, . wo with wq, wo [20480, 20480]): each
branch's output projection gets its own bidirectional ring (collective-permute pairs named by
its dot, bsf,fd->bsd and bsa,ad->bsd), the two results added after (add_add_fusion): the
compiler does not reduce the branches' sum once where the reductions are windowed
(tools/plan/gen.py tp_out_sum)."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plan_xla import MAXTEXT_FLAGS  # noqa: E402

CHILD = r'''
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
topo, F, T, b, S, D, M, out, par = sys.argv[1], *map(int, sys.argv[2:8]), sys.argv[8], sys.argv[9] == "parallel"
devs = list(topologies.get_topology_desc(platform="tpu", topology_name=topo).devices)[:F * T]
mesh = Mesh(np.array(devs).reshape(F, T), ("fsdp", "tensor"))
act = NamedSharding(mesh, P("fsdp", None, "tensor"))  # MaxText: batch over fsdp, embed over tensor
def layer(x, w1, w3, w2, wq=None, wo=None):
    x = jax.lax.with_sharding_constraint(x, act)
    h = jax.nn.silu(jnp.einsum("bsd,df->bsf", x, w1)) * jnp.einsum("bsd,df->bsf", x, w3)
    y = x + jax.lax.with_sharding_constraint(jnp.einsum("bsf,fd->bsd", h, w2), act)
    if par:  # a parallel block: a second branch on the same input (attention's stand-in, tanh
        # between its two projections), its output constrained and added, as MaxText's 2023 decoder
        h2 = jnp.tanh(jnp.einsum("bsd,da->bsa", x, wq))
        y = y + jax.lax.with_sharding_constraint(jnp.einsum("bsa,ad->bsd", h2, wo), act)
    return y
def loss(x, *w):
    return jnp.sum(layer(layer(x, *w), *w).astype(jnp.float32))
wi, wo = NamedSharding(mesh, P("fsdp", "tensor")), NamedSharding(mesh, P("tensor", "fsdp"))
k = 6 if par else 4  # the serial probe takes no wq, wo
g = jax.jit(jax.grad(loss, argnums=tuple(range(1, k))), in_shardings=(act, wi, wi, wo, wi, wo)[:k])
bf = jnp.bfloat16
A = D  # the attention stand-in's width
args = (jax.ShapeDtypeStruct((b * F * T, S, D), bf), jax.ShapeDtypeStruct((D, M), bf),
        jax.ShapeDtypeStruct((D, M), bf), jax.ShapeDtypeStruct((M, D), bf), jax.ShapeDtypeStruct((D, A), bf),
        jax.ShapeDtypeStruct((A, D), bf))[:k]
open(out, "w").write(g.lower(*args).compile().as_text())
'''

SKIP = {"get-tuple-element", "constant", "bitcast", "parameter", "copy-start", "copy-done", "slice-start",
        "slice-done", "partition-id", "dynamic-slice", "add", "and", "clamp", "convert", "multiply", "subtract"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fsdp", type=int, default=16)
    ap.add_argument("--tensor", type=int, default=4)
    ap.add_argument("--batch", type=int, default=6, help="sequences per chip (MaxText's per_device_batch_size)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--d", type=int, default=8192)
    ap.add_argument("--mlp", type=int, default=28672)
    ap.add_argument("--topology", default="v5p:4x4x4")
    ap.add_argument("--flags", choices=("maxtext", "none"), default="maxtext")
    ap.add_argument("--keep", help="write the compiled module here")
    ap.add_argument("--block", choices=("serial", "parallel"), default="serial",
                    help="parallel: a second branch on the layer input added to the MLP's output")
    a = ap.parse_args()
    out = a.keep or f"/tmp/plan_tp_probe_{os.getpid()}.hlo"
    env = dict(os.environ, TPU_ACCELERATOR_TYPE=os.environ.get("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
               ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    if a.flags == "maxtext":
        env["LIBTPU_INIT_ARGS"] = MAXTEXT_FLAGS
    r = subprocess.run([sys.executable, "-c", CHILD, a.topology, str(a.fsdp), str(a.tensor), str(a.batch), str(a.seq),
                        str(a.d), str(a.mlp), out, a.block], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit(f"plan_tp_probe.py: libtpu did not compile: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    text = open(out).read()
    if not a.keep:
        os.remove(out)
    entry = re.search(r"\nENTRY[^\n]*\n(.*?)\n}\n", text, re.S).group(1).split("\n")
    print(f"{a.topology}, mesh fsdp {a.fsdp} x tensor {a.tensor}, {a.batch} x {a.seq} tokens a chip, d {a.d}, "
          f"MLP {a.mlp}; flags {a.flags}. The compiler's order (kernels with their estimated cycles):")
    for line in entry:
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (?:\([^=]*?\)|\S+) ([\w-]+)\(", line)
        if not m or m.group(2) in SKIP:
            continue
        name, op = m.groups()
        on = re.search(r'op_name="([^"]*)"', line)
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        what = ("synchronous " + op if op in ("all-gather", "all-reduce", "reduce-scatter", "all-to-all")
                else op if op.startswith("collective-permute") else
                "async collective fusion" if "async-collective" in name or "async_collective" in line else op)
        print(f"  {name:34s} {what:28s} {int(cyc.group(1)) if cyc else 0:>10d}  {on.group(1) if on else ''}")


if __name__ == "__main__":
    main()
