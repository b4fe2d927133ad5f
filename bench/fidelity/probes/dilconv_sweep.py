#!/usr/bin/env python3
"""dilconv_sweep.py [CHIPS] [--only SUBSTR]: the XLA TPU compiler's cost of window-dilated and
strided convolutions (session 29, dilconv; issue 30): one convolution shape at a time, sweeping
the rhs (window) dilation, the window stride, the input size against the window's reach, the
padding and the feature counts. bf16 [B,H,H,Ci] x [k,k,Ci,Co] NHWC/HWIO, shapes made up off the
families corpus. Writes a mini corpus in the families' form under data/dilconv_sweep/
(NAME.hlo, NAME.json, compiled/NAME.GEN.hlo.gz: the conv fusion's window_config) that
kernel_ratios.py and compare.py read:

    python3 bench/fidelity/compare.py --corpus bench/fidelity/probes/data/dilconv_sweep --compiled --split ''
    flock /tmp/libtpu_probe.lock python3 bench/fidelity/probes/dilconv_sweep.py v4,v5e,v5p,v6e   # libtpu"""
import os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax

OUT = os.path.join(HERE, "data", "dilconv_sweep")
DT = {"bf16": jnp.bfloat16, "f32": jnp.float32}


def conv(x, w, s, d, pad):
    return lax.conv_general_dilated(x, w, (s, s), pad, rhs_dilation=(d, d),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def case(b, h, ci, co, k, s, d, pad):
    name = f"dcs_b{b}_{h}x{h}_c{ci}to{co}_k{k}s{s}d{d}_{pad.lower()}"
    return (name, lambda x, w, s=s, d=d, pad=pad: conv(x, w, s, d, pad),
            [((b, h, h, ci), "bf16"), ((k, k, ci, co), "bf16")])


def cases():
    out = []
    for d in [1, 2, 3, 4, 6, 8, 9, 12, 16]:          # A: dilation, few input features
        out.append(case(2, 19, 48, 128, 3, 1, d, "SAME"))
    for d in [1, 2, 4, 8, 12, 16]:                   # B: dilation, full lanes, batch 1
        out.append(case(1, 23, 128, 96, 3, 1, d, "SAME"))
    for ci in [16, 96, 128, 192]:                    # C: input features at d = 8
        out.append(case(2, 19, ci, 128, 3, 1, 8, "SAME"))
    for h in [13, 25, 40]:                           # D: input size against the reach (d = 6)
        out.append(case(2, h, 48, 128, 3, 1, 6, "SAME"))
    for pad in ["VALID"]:
        out.append(case(2, 40, 48, 128, 3, 1, 6, pad))
    for d in [1, 4, 8, 12]:                          # F: 5x5, few output features
        out.append(case(1, 37, 48, 24, 5, 1, d, "SAME"))
    for s in [1, 2, 3, 4]:                           # E: stride
        out.append(case(4, 40, 64, 128, 3, s, 1, "SAME"))
        out.append(case(4, 60, 96, 64, 1, s, 1, "VALID"))
        out.append(case(8, 48, 3, 256, 7, s, 1, "SAME"))
    for co in [128, 256, 384]:                       # G: output feature tiles against the dilation
        for d in [2, 6, 10, 14]:
            out.append(case(2, 21, 32, co, 3, 1, d, "SAME"))
    for b in [4, 8]:                                 # H: the batch against the output tiles
        for co in [128, 256]:
            out.append(case(b, 21, 32, co, 3, 1, 6, "SAME"))
    return out


def main():
    gen.write_probe_corpus(cases(), OUT, "dilconv_sweep", DT, sys.argv[1:])


if __name__ == "__main__":
    main()
