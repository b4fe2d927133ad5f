#!/usr/bin/env python3
"""s2b_carry.py [CHIPS] (session 23, cnn; needs libtpu, compile-only; no rule yet): how far the XLA
TPU compiler carries a space-to-batch convolution's split form (a 3x3 convolution of a batch
of 2-4, its W cut into 8 pieces folded into the batch: src/compile/passes/space_to_batch.c)
through the ops after it before it relays the value back, and what that copy costs. Cases
(bf16 NHWC, shapes off the families corpus; the convolution is `SAME`, 3x3, stride 1):
  c       the convolution alone
  cr      + ReLU
  cbr     + batch norm over (N, H, W) (f32 statistics) + ReLU
  cbrp    + a 1x1 convolution to Co features
  cbrpb   + a batch norm
  cbrpbx  ResNet's bottleneck: 1x1 convolution, BN, ReLU, the above, the block's input added,
          a ReLU (B = 8: not split, the control)
  cc      3x3 convolution, ReLU, 3x3 convolution (two split convolutions in a row)
One JSON line per case and generation (data/s2b_carry.jsonl): the compiler's top-level ops
(name, opcode, fusion kind, op_name, estimated_cycles, result shape with layout), its copies'
sum, and tpusim's ops (name, kind, op_name, cycles) at the commit that wrote them."""
import json, os, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
from jax import lax
BF, F32 = jnp.bfloat16, jnp.float32
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)


def bn(y, g, b):
    yf = y.astype(F32)
    m = yf.mean((0, 1, 2))
    v = ((yf - m) ** 2).mean((0, 1, 2))
    return ((yf - m) * lax.rsqrt(v + 1e-5) * g.astype(F32) + b.astype(F32)).astype(BF)


def relu(y):
    return jnp.maximum(y, 0)


def c(x, w): return conv(x, w)
def cr(x, w): return relu(conv(x, w))
def cbr(x, w, g, b): return relu(bn(conv(x, w), g, b))
def cbrp(x, w, g, b, p): return conv(cbr(x, w, g, b), p)
def cbrpb(x, w, g, b, p, g2, b2): return bn(cbrp(x, w, g, b, p), g2, b2)
def cbrpbx(x, w, g, b, p, g2, b2): return relu(cbrpb(x, w, g, b, p, g2, b2) + x)
def cc(x, w, w2): return conv(cr(x, w), w2)


def blk(x, w1, g1, b1, w, g, b, p, g2, b2):
    return relu(cbrpb(relu(bn(conv(x, w1), g1, b1)), w, g, b, p, g2, b2) + x)


CASES = []
for B, H, C in ((4, 14, 256), (2, 14, 256), (4, 28, 128), (8, 14, 256)):
    Co, tag = 4 * C, f"{B}x{H}x{H}x{C}"
    x, w, v, p, vo = ((B, H, H, C), BF), ((3, 3, C, C), BF), ((C,), BF), ((1, 1, C, Co), BF), ((Co,), BF)
    CASES += [(f"c_{tag}", c, [x, w]), (f"cr_{tag}", cr, [x, w]), (f"cbr_{tag}", cbr, [x, w, v, v]),
              (f"cbrp_{tag}_{Co}", cbrp, [x, w, v, v, p]), (f"cbrpb_{tag}_{Co}", cbrpb, [x, w, v, v, p, vo, vo]),
              (f"cc_{tag}", cc, [x, w, w]),
              # ResNet's bottleneck: 1x1 to C, BN, ReLU, then the tail above and the residual
              (f"cbrpbx_{B}x{H}x{H}x{Co}", blk, [((B, H, H, Co), BF), ((1, 1, Co, C), BF), v, v, w, v, v, p, vo, vo])]
    if B == 4 and H == 14:
        CASES.append((f"cbrp_{tag}_{C}", cbrp, [x, w, v, v, ((1, 1, C, C), BF)]))

SHAPE_RE = re.compile(r"= (\S+\[[^\]]*\]\{[^}]*\})")
chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v6e"]
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with tempfile.TemporaryDirectory() as d:
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d, lambda n: not only or any(o in n for o in only)):
        entry = txt[txt.rfind("\nENTRY"):]
        shapes = {}
        for line in entry.splitlines():
            om, sm = gen.OP_RE.match(line), SHAPE_RE.search(line)
            if om and sm:
                shapes[om.group(1)] = sm.group(1)
        ops = [(o[0], o[1], o[2], o[3], o[4], shapes.get(o[0])) for o in gen.entry_ops(txt)]
        rep = os.path.join(d, "r.json")
        env = dict(os.environ, TPUSIM_CACHE="off")
        r = subprocess.run([TPUSIM, "run", path, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True, env=env)
        tops = [(o["name"], o["kind"], o.get("op_name"), o["cycles"]) for o in json.load(open(rep))["ops"]] \
            if r.returncode == 0 else r.stderr[:200]
        print(json.dumps(dict(case=name, chip=chip, ops=ops, compiler=sum(o[4] for o in ops),
                              copies=sum(o[4] for o in ops if o[1] == "copy"), tpusim_commit=commit,
                              tpusim=tops)), flush=True)
