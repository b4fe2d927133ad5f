#!/usr/bin/env python3
"""small_batch_conv.py [CHIPS] [--only SUBSTR]: the XLA TPU compiler's cost of plain (ungrouped)
convolutions whose batch of 1, 2 or 4 sits in the sublanes (EmitAllBatchInSublanes; result tiles
T(2,128) / T(4,128)) against a batch of 8 (session 20, conv3d): bf16 [B,H,H,Ci] x [k,k,Ci,Co],
SAME padding, window dilation d, H and d chosen so that the compiler does not fold W into the
batch (space to batch: a halo wider than a piece, or H under 16). Shapes made up off the
families corpus. Writes a mini corpus in the families' form under data/small_batch_conv/
(NAME.hlo, NAME.json, compiled/NAME.GEN.hlo.gz) that kernel_ratios.py and compare.py read:

    python3 bench/fidelity/compare.py --corpus bench/fidelity/probes/data/small_batch_conv --compiled --split ''
    python3 bench/fidelity/probes/small_batch_conv.py v4,v5e,v5p,v6e      # needs libtpu (jax[tpu])"""
import os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax

OUT = os.path.join(HERE, "data", "small_batch_conv")
DT = {"bf16": jnp.bfloat16, "f32": jnp.float32}


def conv(x, w, d):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(d, d),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


SHAPES = [  # (H, Ci, Co, k, d)
    (31, 256, 64, 3, 4), (31, 128, 64, 3, 4), (31, 512, 64, 3, 4), (31, 256, 128, 3, 4),
    (31, 256, 256, 3, 4), (31, 32, 256, 5, 6), (31, 64, 128, 3, 4), (21, 256, 64, 3, 4),
    (15, 256, 64, 3, 1), (15, 128, 128, 3, 2), (15, 32, 64, 3, 1), (15, 256, 64, 1, 1),
]


def cases():
    out = []
    for h, ci, co, k, d in SHAPES:
        for b in [1, 2, 4, 8]:
            out.append((f"sbconv_b{b}_{h}x{h}_c{ci}to{co}_k{k}d{d}", lambda x, w, d=d: conv(x, w, d),
                        [((b, h, h, ci), "bf16"), ((k, k, ci, co), "bf16")]))
    return out


def main():
    gen.write_probe_corpus(cases(), OUT, "small_batch_conv", DT, sys.argv[1:])


if __name__ == "__main__":
    main()
