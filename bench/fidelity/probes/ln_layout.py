#!/usr/bin/env python3
"""ln_layout.py [CHIPS] (session 22, convmodels; needs libtpu, compile-only; no rule): a layer
norm over the features of an NHWC bf16 activation (shapes off the families corpus), alone
(`ln`) and after a 7x7 depthwise convolution with a bias (`cnb`, ConvNeXt's block head). Which
layout does the XLA TPU compiler give the activation and the row statistics, and what do the
statistics' kernels and the normalization cost, against tpusim's own compilation of the same
JAX HLO? One JSON line per case and generation (data/ln_layout.jsonl): the parameter's layout,
the compiler's top-level ops (name, opcode, fusion kind, estimated_cycles) and tpusim's ops
(name, kind, op_name, cycles) at the commit that wrote them (tpusim_commit)."""
import json, os, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax
BF, F32 = jnp.bfloat16, jnp.float32
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))


def ln(x, g, b):
    xf = x.astype(F32)
    m = xf.mean(-1, keepdims=True)
    v = ((xf - m) ** 2).mean(-1, keepdims=True)
    return ((xf - m) * lax.rsqrt(v + 1e-6) * g.astype(F32) + b.astype(F32)).astype(BF)


def cnb(x, w, bd, g, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                 feature_group_count=x.shape[-1]) + bd
    return ln(y, g, b)


CASES = []
for s in ((1, 28, 28, 192), (2, 28, 28, 192), (4, 28, 28, 192), (8, 28, 28, 192), (4, 24, 24, 160),
          (4, 32, 32, 192), (4, 20, 20, 96), (3136, 192)):
    C = s[-1]
    CASES.append(("ln_" + "x".join(map(str, s)), ln, [(s, BF), ((C,), BF), ((C,), BF)]))
for B, H, C in ((2, 28, 192), (4, 28, 192), (8, 28, 192)):
    CASES.append((f"cnb_{B}x{H}x{H}x{C}", cnb, [((B, H, H, C), BF), ((7, 7, 1, C), BF), ((C,), BF), ((C,), BF), ((C,), BF)]))

chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v6e"]
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with tempfile.TemporaryDirectory() as d:
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d):
        lay = re.search(r"%x\.1 = \S+\{([^}]*)\}", txt)
        ops = [(o[0], o[1], o[2], o[4]) for o in gen.entry_ops(txt)]
        rep = os.path.join(d, "r.json")
        env = dict(os.environ, TPUSIM_CACHE="off")
        r = subprocess.run([TPUSIM, "run", path, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True, env=env)
        tops = [(o["name"], o["kind"], o.get("op_name"), o["cycles"]) for o in json.load(open(rep))["ops"]] if r.returncode == 0 else r.stderr[:200]
        print(json.dumps(dict(case=name, chip=chip, x_layout=lay.group(1) if lay else None, ops=ops,
                              compiler=sum(o[3] for o in ops if o[3]), tpusim_commit=commit, tpusim=tops)), flush=True)
