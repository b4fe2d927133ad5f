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
import gzip, json, os, re, sys
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
        rec = {"name": name, "family": "small_tiles", "category": "probe", "split": "probe", "chips": {}}
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
