#!/usr/bin/env python3
"""s8_pad.py [CHIPS] [--only SUBSTR]: the tiles the XLA TPU compiler runs an 8-bit pad in
(session 19, padtile2). Standalone pads of s8 and bf16 arrays of shapes made up off the
families corpus (second-minor dimension a multiple of 32 or not, before and after the pad;
rank 2 and 3). Rule found (with small_tiles.py's pad2_*_s8): the compiler tiles an s8 array
T(32,128)(4,1) where its second-minor dimension is a multiple of 32, else T(8,128)(4,1), and
pads only in T(8,128)(4,1): an operand in 32-row tiles is copied first (a kernel), the result
copied back only where its second-minor dimension is a multiple of 32; bf16 pads are one kernel.
Writes a corpus in the families' form under data/s8_pad/ (as small_tiles.py):

    python3 bench/fidelity/kernel_ratios.py --corpus bench/fidelity/probes/data/s8_pad --split ''
    python3 bench/fidelity/probes/s8_pad.py v4,v5e,v5p,v6e      # needs libtpu (jax[tpu])"""
import os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
# this folder's libtpu.py would shadow the libtpu package jax loads
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp

OUT = os.path.join(HERE, "data", "s8_pad")
DT = {"s8": jnp.int8, "bf16": jnp.bfloat16, "f32": jnp.float32}


def cases():
    out = []
    for dt in ["s8", "bf16"]:
        for shape, pad in [((96, 200), ((1, 1), (0, 0))), ((96, 200), ((0, 0), (2, 3))),
                           ((300, 64), ((2, 2), (0, 0))), ((320, 48), ((0, 0), (1, 1))),
                           ((128, 128), ((1, 1), (1, 1))), ((640, 40), ((16, 16), (0, 0))),
                           ((8, 96, 160), ((1, 0), (0, 0), (0, 0))), ((6, 50, 300), ((0, 0), (3, 3), (0, 0)))]:
            n = "x".join(map(str, shape))
            p = "_".join(f"{a}-{b}" for a, b in pad)
            out.append((f"s8pad_{n}_{p}_{dt}", lambda x, pad=pad: jnp.pad(x, pad), [(shape, dt)]))
    return out


def main():
    gen.write_probe_corpus(cases(), OUT, "s8_pad", DT, sys.argv[1:])


if __name__ == "__main__":
    main()
