#!/usr/bin/env python3
"""reduce_epilogue.py [GEN ...]: matmul kernels whose epilogue reduces the product (f32-score
attention's q.k^T with the row max, exp and row sums; a q.k^T with only its row max or the max
subtracted back; a projection plus a residual with the next norm's row sums), against the same
matmuls with an elementwise epilogue only, as the XLA TPU compiler (libtpu, compile-only) costs
each kernel and as tpusim runs the compiler's own program (the kernel of the same name: its
cycles and unit cycles, DMA = dma-in + dma-out, vector = vpu + eup + xlu, mxu). Shapes are off
both corpora. Question (session 23, v5p): which of tpusim's overlap, DMA + vector and DMA +
vector + MXU fits the compiler's kernel, per generation? Prints one JSON line per case
(CASES=i,j,... picks cases; TPUSIM: the binary). Data in probes/data/reduce_epilogue.jsonl,
tpusim at main 80167b8e (before the rule): attention cases 0-8 on v5p, 0,2,4,6 on v5e/v4/v6e;
qk exp / exp_sum / mask_exp_sum on v5p and v5e; proj on v5p and v4 where the run reached them."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile-only: other probes may hold libtpu
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core"}
F32, BF = jnp.float32, jnp.bfloat16


def scores(q, k):
    """Attention scores as the corpora write them: bf16 q.k^T, widened to f32 and scaled."""
    return jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(F32) / (q.shape[-1] ** 0.5)


def masked(q, k):
    n = q.shape[2]
    return jnp.where(jnp.tril(jnp.ones((n, n), bool)), scores(q, k), -1e9)


def exp_sum(s):
    e = jnp.exp(s - s.max(-1, keepdims=True))
    return e, e.sum(-1)


# epilogues of the batched q.k^T product (b, h, s, d: q, k bf16[b,h,s,d])
EPI = {
    "ew": lambda q, k: scores(q, k),                                   # no reduction (control)
    "max": lambda q, k: (scores(q, k), scores(q, k).max(-1)),          # the product and its row max
    "sub": lambda q, k: scores(q, k) - scores(q, k).max(-1, keepdims=True),  # the max subtracted back
    "mask": lambda q, k: masked(q, k),                                 # a causal mask, no reduction (control)
    "mask_sub": lambda q, k: masked(q, k) - masked(q, k).max(-1, keepdims=True),  # attention's q.k^T kernel
    "exp": lambda q, k: jnp.exp(scores(q, k)),                          # exponentials, no reduction (control)
    "exp_sum": lambda q, k: exp_sum(scores(q, k)),                     # softmax's numerator and row sum
    "mask_exp_sum": lambda q, k: exp_sum(masked(q, k)),
}
ORDER = ["exp_sum", "exp", "mask_exp_sum", "sub", "ew", "mask_sub", "mask", "max"]


def attention(q, k, v, causal):
    """The corpora's attention (f32 scores): its q.k^T kernel reduces the product (the row max,
    exp and the row sums) and p.v reads the exponentials."""
    s = masked(q, k) if causal else scores(q, k)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1).astype(q.dtype), v)


ATTN = {"attn": lambda q, k, v: attention(q, k, v, False), "attn_causal": lambda q, k, v: attention(q, k, v, True)}
# epilogues of a 2-D projection plus a residual (m, n, kdim: x bf16[m,kdim], w bf16[kdim,n], r bf16[m,n])
EPI2 = {
    "res": lambda x, w, r: (x @ w + r),                                                  # control
    "res_sumsq": lambda x, w, r: (lambda y: (y, (y.astype(F32) ** 2).sum(-1)))(x @ w + r),  # next norm's row sums
}
CASES = [("attn", e, s) for s in [(2, 8, 1024, 64), (4, 8, 512, 128), (2, 12, 768, 128), (1, 16, 2048, 64),
                                   (3, 6, 1536, 64), (6, 4, 640, 128)] for e in ATTN] + \
        [("qk", e, s) for e in ORDER for s in [(2, 8, 768, 64), (4, 4, 1024, 128), (1, 12, 1536, 64), (3, 6, 640, 128)]] + \
        [("proj", e, s) for e in EPI2 for s in [(3072, 1536, 1536), (6144, 1024, 2048), (2048, 2560, 640)]]
if os.environ.get("CASES"):
    CASES = [CASES[int(i)] for i in os.environ["CASES"].split(",")]


def entry_ops(text):
    """name -> (estimated_cycles, kind, op_name) of the compiled entry computation's ops."""
    out = {}
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = ", line)
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        if m and cyc:
            kind, name = re.search(r"kind=(k\w+)", line), re.search(r'op_name="([^"]*)"', line)
            out[m.group(1)] = (int(cyc.group(1)), kind.group(1) if kind else "", name.group(1) if name else "")
    return out


def sim_ops(text, gen, d):
    src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                    "--quiet"], check=True, env=dict(os.environ, TPUSIM_CACHE="off"))
    return json.load(open(rep))["ops"]


def main():
    gens = sys.argv[1:] or list(TOPO)
    for gen in gens:
        dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
        for form, epi, shape in CASES:
            if form == "qk":
                b, h, s, d = shape
                fn, dims = EPI[epi], [(b, h, s, d), (b, h, s, d)]
            elif form == "attn":
                fn, dims = ATTN[epi], [shape] * 3
            else:
                m, n, kd = shape
                fn, dims = EPI2[epi], [(m, kd), (kd, n), (m, n)]
            args = [jax.ShapeDtypeStruct(x, BF, sharding=SingleDeviceSharding(dev)) for x in dims]
            text = jax.jit(fn).lower(*args).compile().as_text()
            comp = entry_ops(text)
            with tempfile.TemporaryDirectory() as tdir:
                ops = sim_ops(text, gen, tdir)
            rows = []
            for o in ops:
                u = o["unit_cycles"]
                if u.get("mxu", 0) <= 0 or o["name"] not in comp:
                    continue
                rows.append({"name": o["name"], "kind": comp[o["name"]][1], "op_name": comp[o["name"]][2], "compiler": comp[o["name"]][0],
                             "cycles": o["cycles"], "dma": u.get("dma-in", 0) + u.get("dma-out", 0),
                             "vec": u.get("vpu", 0) + u.get("eup", 0) + u.get("xlu", 0), "mxu": u.get("mxu", 0)})
            print(json.dumps({"gen": gen, "form": form, "epilogue": epi, "shape": shape, "kernels": rows,
                              "compiler_total": sum(c[0] for c in comp.values()),
                              "tpusim_total": sum(o["cycles"] * o.get("count", 1) for o in ops)}), flush=True)


if __name__ == "__main__":
    main()
