#!/usr/bin/env python3
"""small_tiles.py [CHIPS] [--only SUBSTR]: the XLA TPU compiler's cost of kernels that move
small tiles (session 19, padtile): tiles of less than one vector register (bf16 T(8,128)(2,1),
s8 T(8,128)(4,1), T(2,128), T(4,128)) against whole-register ones (f32 T(8,128), bf16
T(16,128)(2,1)). Programs made up off the families corpus: standalone pads and transposes of
2-D to 4-D arrays (bf16, s8, f32), cumulative sums along the rows (the compiler's blocked scan
pads and slices VMEM values), and small-batch convolutions behind a ReLU (a pad of the batch in
the sublanes). Compiles each program with libtpu (compile-only, in this process) for one
device of each generation and writes a corpus in the families' form under data/small_tiles/:
NAME.hlo (JAX's HLO), NAME.json (the compiler's top-level ops with estimated_cycles per
generation) and compiled/NAME.GEN.hlo.gz, so that the fidelity tools read it:

    python3 bench/fidelity/kernel_ratios.py --corpus bench/fidelity/probes/data/small_tiles --split '' --by kind,space,dtype
    python3 bench/fidelity/probes/small_tiles.py v4,v5e,v5p,v6e      # needs libtpu (jax[tpu])"""
import os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
# this folder's libtpu.py would shadow the libtpu package jax loads
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax

OUT = os.path.join(HERE, "data", "small_tiles")
DT = {"s8": jnp.int8, "bf16": jnp.bfloat16, "f32": jnp.float32}


def conv(x, w, stride):
    return lax.conv_general_dilated(jax.nn.relu(x), w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cases():
    out = []
    for dt in ["bf16", "s8", "f32"]:
        for r, c in [(256, 64), (1000, 7), (512, 129), (64, 1000), (4096, 33), (2048, 256)]:
            for pad in [((1, 1), (0, 0)), ((0, 0), (1, 2))]:
                p = "_".join(f"{a}-{b}" for a, b in pad)
                out.append((f"pad2_{r}x{c}_{p}_{dt}", lambda x, pad=pad: jnp.pad(x, pad), [((r, c), dt)]))
        for shape, pad in [((32, 4, 33, 128), ((0, 0), (0, 0), (1, 7), (0, 0))),
                           ((16, 4, 20, 256), ((0, 0), (0, 0), (0, 8), (0, 0))),
                           ((300, 8, 128), ((0, 5), (0, 0), (0, 0))),
                           ((8, 30, 2, 16), ((0, 0), (0, 0), (0, 0), (0, 4))),
                           ((4, 14, 14, 96), ((0, 0), (1, 1), (1, 1), (0, 0)))]:
            n = "x".join(map(str, shape))
            out.append((f"padn_{n}_{dt}", lambda x, pad=pad: jnp.pad(x, pad), [(shape, dt)]))
        for shape, perm in [((64, 48, 128), (1, 0, 2)), ((16, 40, 8, 256), (2, 0, 1, 3)),
                            ((200, 24, 128), (1, 0, 2))]:
            n = "x".join(map(str, shape))
            out.append((f"tr_{n}_{''.join(map(str, perm))}_{dt}",
                        lambda x, perm=perm: jnp.transpose(x, perm), [(shape, dt)]))
    for dt in ["bf16", "f32"]:
        for r, c in [(700, 300), (2000, 257), (1500, 129), (600, 1100)]:
            out.append((f"cumsum_{r}x{c}_{dt}", lambda x: jnp.cumsum(x, axis=0), [((r, c), dt)]))
    for b, h, ci, co, s in [(2, 24, 64, 64, 2), (4, 20, 128, 128, 2), (2, 30, 96, 192, 1), (4, 12, 256, 64, 1),
                            (8, 16, 64, 128, 2)]:
        out.append((f"reluconv_b{b}_{h}x{h}_c{ci}to{co}_s{s}_bf16", lambda x, w, s=s: conv(x, w, s),
                    [((b, h, h, ci), "bf16"), ((3, 3, ci, co), "bf16")]))
    return out


def main():
    gen.write_probe_corpus(cases(), OUT, "small_tiles", DT, sys.argv[1:])


if __name__ == "__main__":
    main()
