#!/usr/bin/env python3
"""tconv_sweep.py [CHIPS] [--only SUBSTR]: the XLA TPU compiler's cost of transposed (input-
dilated) convolutions (session 30, tconv; issue 30): lax.conv_transpose, bf16 [B,H,H,Ci] x
[k,k,Ci,Co] NHWC/HWIO, shapes made up off the families corpus, sweeping the stride (the input
dilation 1-4), the kernel size, the output features (3-512), the input features, the batch and
the spatial size (under 16: the input-walking emitter; 24 and wider: space to batch's folded
form). Writes a mini corpus in the families' form under data/tconv_sweep/ (NAME.hlo,
NAME.json, compiled/NAME.GEN.hlo.gz) that kernel_ratios.py and compare.py read:

    python3 bench/fidelity/compare.py --corpus bench/fidelity/probes/data/tconv_sweep --compiled --split ''
    flock /tmp/libtpu_probe.lock python3 bench/fidelity/probes/tconv_sweep.py v4,v5e,v5p,v6e   # libtpu"""
import os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax

OUT = os.path.join(HERE, "data", "tconv_sweep")
DT = {"bf16": jnp.bfloat16, "f32": jnp.float32}


def case(b, h, ci, co, k, s, pad):
    name = f"tcs_b{b}_{h}x{h}_c{ci}to{co}_k{k}s{s}_{pad.lower()}"
    return (name, lambda x, w, s=s, pad=pad: lax.conv_transpose(x, w, (s, s), pad,
                                                                 dimension_numbers=("NHWC", "HWIO", "NHWC")),
            [((b, h, h, ci), "bf16"), ((k, k, ci, co), "bf16")])


def cases():
    out = []
    for s in [1, 2, 3, 4]:                       # A: stride (input dilation)
        out.append(case(4, 12, 96, 128, 3, s, "VALID"))
        out.append(case(1, 10, 64, 192, 4, s, "SAME"))
    for co in [3, 8, 64, 128, 256, 512]:         # B: output features
        out.append(case(4, 12, 64, co, 3, 2, "VALID"))
        out.append(case(1, 9, 160, co, 3, 4, "VALID"))
    for k in [2, 3, 4, 5]:                       # C: kernel size
        out.append(case(2, 11, 128, 128, k, 2, "SAME"))
        out.append(case(2, 11, 128, 128, k, 3, "VALID"))
    for h in [5, 9, 13]:                         # D: spatial size (not folded)
        out.append(case(2, h, 64, 96, 4, 2, "VALID"))
    for b in [1, 2, 4, 8, 16]:                   # E: batch
        out.append(case(b, 10, 128, 256, 3, 3, "SAME"))
        out.append(case(b, 6, 48, 3, 4, 2, "VALID"))
    for ci in [16, 48, 192, 384]:                # F: input features
        out.append(case(2, 12, ci, 64, 3, 2, "SAME"))
    for co in [3, 4, 8, 16]:                     # G: few output features, batch 8
        out.append(case(8, 9, 96, co, 3, 2, "SAME"))
        out.append(case(8, 13, 48, co, 4, 4, "VALID"))
    for co in [32, 64, 128, 256]:                # H: folded (space to batch), 24 and wider
        out.append(case(2, 24, 192, co, 4, 2, "SAME"))
    for b in [1, 4]:
        out.append(case(b, 40, 96, 64, 4, 2, "SAME"))
        out.append(case(b, 24, 96, 64, 3, 2, "SAME"))
    return out


def main():
    gen.write_probe_corpus(cases(), OUT, "tconv_sweep", DT, sys.argv[1:])


if __name__ == "__main__":
    main()
