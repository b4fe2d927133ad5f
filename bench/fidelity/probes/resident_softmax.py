#!/usr/bin/env python3
"""resident_softmax.py: grouped-query attention's softmax kernels over scores the compiler
keeps in VMEM (session 18, gqa). For each (B, KV, G, S) off the families corpus, the program
q[B,S,KV,G,H], k/v[B,S,KV,H] -> softmax32(q k^T) v (no mask) is lowered with JAX, compiled by
the real XLA TPU compiler (tpu_compile.py, v5e) and timed by tpusim; prints both figures for
the softmax's exp kernels (the compiler's kLoop kernels over [B,KV,G,S,S]; tpusim's kernels
fusing exp). Usage: resident_softmax.py TPUSIM OUTDIR"""
import json, os, re, subprocess, sys
import jax, jax.numpy as jnp

tpusim, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
TOOL = "/work/shared/tools/tpu_compile.py"
CASES = [(2, 2, 2, 256), (2, 4, 2, 384), (3, 2, 2, 512), (2, 8, 2, 128), (2, 2, 3, 640)]
H = 64

def f(q, k, v):
    s = jnp.einsum("bskgh,btkh->bkgst", q, k) * H ** -0.5
    s = s.astype(jnp.float32)
    e = jnp.exp(s - s.max(-1, keepdims=True))
    a = (e / e.sum(-1, keepdims=True)).astype(q.dtype)
    return jnp.einsum("bkgst,btkh->bskgh", a, v)

for B, KV, G, S in CASES:
    name = f"gqa_sm_b{B}kv{KV}g{G}s{S}"
    q = jax.ShapeDtypeStruct((B, S, KV, G, H), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((B, S, KV, H), jnp.bfloat16)
    hlo = jax.jit(f).lower(q, kv, kv).compiler_ir("hlo").as_hlo_text()
    src = os.path.join(out, name + ".hlo")
    open(src, "w").write(hlo)
    comp = os.path.join(out, name + ".v5e.hlo")
    r = subprocess.run([sys.executable, TOOL, src, "v5e:2x2", comp], capture_output=True, text=True)
    if r.returncode:
        print(json.dumps({"case": name, "error": r.stderr.strip().splitlines()[-1:]}), flush=True)
        continue
    entry = open(comp).read()
    entry = entry[entry.rfind("\nENTRY"):]
    big = f"[{B},{KV},{G},{S},{S}]"
    xla = []
    for l in entry.splitlines():
        m = re.search(r'estimated_cycles":"(\d+)"', l)
        if m and "kind=kLoop" in l and "fusion(" in l:
            ops = re.search(r"fusion\(([^)]*)\)", l).group(1)
            if f"[{B},{KV},{G},{S}]" in l.split("=")[1][:40] or big in l.split("=")[1][:40]:
                xla.append(int(m.group(1)))
    rep = os.path.join(out, name + ".json")
    subprocess.run([tpusim, "run", src, "--chip", "v5e", "--mode", "timing", "--report", rep, "--quiet", "--no-cache"], check=True)
    ops = json.load(open(rep))["ops"]
    sim = [o["cycles"] for o in ops if o["kind"] in ("fusion:kLoop", "fusion:kInput") and o["flops"] >= B * KV * G * S * S]
    print(json.dumps({"case": name, "xla_softmax_kernels": xla, "tpusim_exp_kernels": sim,
                      "xla_sum": sum(xla), "tpusim_sum": sum(sim),
                      "ratio": round(sum(sim) / sum(xla), 3) if xla else None}), flush=True)
