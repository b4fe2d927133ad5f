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
import gzip, json, os, re, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
# this folder's libtpu.py would shadow the libtpu package jax loads
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax

OUT = os.path.join(HERE, "data", "s8_pad")
DT = {"s8": jnp.int8, "bf16": jnp.bfloat16, "f32": jnp.float32}


def conv(x, w, stride):
    return lax.conv_general_dilated(jax.nn.relu(x), w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


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
    argv = sys.argv[1:]
    only = ""
    if "--only" in argv:
        i = argv.index("--only")
        only = argv[i + 1]
        del argv[i:i + 2]
    chips = argv[0].split(",") if argv else ["v4", "v5e", "v5p", "v6e"]
    os.makedirs(os.path.join(OUT, "compiled"), exist_ok=True)
    for name, f, sig in cases():
        if only not in name or os.path.exists(os.path.join(OUT, name + ".json")):
            continue
        plain = [gen.sds(s, DT[d]) for s, d in sig]
        open(os.path.join(OUT, name + ".hlo"), "w").write(jax.jit(f).lower(*plain).as_text(dialect="hlo"))
        rec = {"name": name, "family": "s8_pad", "category": "probe", "split": "probe", "chips": {}}
        for chip in chips:
            dev = gen.device(chip)
            c = jax.jit(f).lower(*[gen.sds(s, DT[d], dev) for s, d in sig]).compile()
            txt = c.as_text()
            import jaxlib._hlo as H
            o = H.HloPrintOptions()
            o.print_large_constants = True  # tpusim reads the constants' values
            with gzip.open(os.path.join(OUT, "compiled", f"{name}.{chip}.hlo.gz"), "wt") as g:
                g.write(c.runtime_executable().hlo_modules()[0].to_string(o))
            ops = gen.entry_ops(txt)
            rec["chips"][chip] = {"ops": ops, "estimated_cycles": sum(o[4] for o in ops)}
            print(name, chip, "; ".join(f"{o[0]}/{o[1]} {o[4]}" for o in ops)[:300], flush=True)
        json.dump(rec, open(os.path.join(OUT, name + ".json"), "w"))


if __name__ == "__main__":
    main()
