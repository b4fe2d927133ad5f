#!/usr/bin/env python3
"""gqa_mask.py: is grouped-query attention's softmax normalisation a kernel of its own before
PV (session 18, gqa2)? For each case MASK:B:KV:G:S[:READER] off the families corpus, the program
q[B,S,KV,G,H], k/v[B,S,KV,H] -> o = softmax32(mask(q k^T / sqrt(H))) v, then READER of o, is
compiled through jax.jit by the real XLA TPU compiler (libtpu, compile-only, as gen_families.py
compiles); prints whether a kernel without a dot or convolution computes the division ("own")
or PV's kernel does ("in_pv"), and the layouts of the [B,KV,G,S,S] scores. MASK: none, causal
(where on iota), pad (where on a [B,S] bool parameter), bias (an added f32 [B,1,1,S,S]
parameter). READER: 0 o returned, 1 the output projection bskgh,kghd->bsd (llama), 2 o
reshaped to [B,S,KV*G*H] @ W, 3 a dot contracting h alone (bskgh,kghd->bskgd), 4 o * 2.
Session 18 result (v5e, v4, v5p alike): "own" exactly when B, KV, G > 1 and READER is 1 or 3;
the mask does not matter. Usage: gqa_mask.py OUTDIR CHIP[,CHIP] [CASE...]"""
import json, os, re, sys
# this folder's libtpu.py would shadow the libtpu package jax loads
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

out, chips = sys.argv[1], sys.argv[2].split(",")
os.makedirs(out, exist_ok=True)
TOPO = {"v5e": "v5e:2x2", "v4": "v4:2x2x1", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
H = 64
CASES = [("none", 3, 2, 2, 512), ("causal", 3, 2, 2, 512), ("none", 3, 2, 2, 512, 1), ("causal", 3, 2, 2, 512, 1),
         ("pad", 3, 2, 2, 512, 1), ("none", 3, 2, 2, 512, 2), ("causal", 3, 2, 2, 512, 2), ("none", 3, 2, 2, 512, 3),
         ("none", 3, 2, 2, 512, 4), ("causal", 2, 4, 2, 256, 1), ("none", 2, 2, 4, 384, 1), ("none", 1, 2, 2, 512, 1)]
if len(sys.argv) > 3:
    CASES = [(c.split(":")[0],) + tuple(int(x) for x in c.split(":")[1:]) for c in sys.argv[3:]]
_dev = {}


def device(chip):
    if chip not in _dev:
        _dev[chip] = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[chip]).devices[0]
    return _dev[chip]


def f(mask, proj):
    def g(q, k, v, *extra):
        s = jnp.einsum("bskgh,btkh->bkgst", q, k) * H ** -0.5
        S = s.shape[-1]
        if mask == "causal":
            i, j = jnp.arange(S)[:, None], jnp.arange(S)[None, :]
            s = jnp.where(j <= i, s, jnp.finfo(s.dtype).min)
        elif mask == "pad":
            s = jnp.where(extra[0][:, None, None, None, :], s, jnp.finfo(s.dtype).min)
        elif mask == "bias":
            s = s + extra[0]
        a = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(q.dtype)
        o = jnp.einsum("bkgst,btkh->bskgh", a, v)
        if proj == 1:  # the output projection, contracting k, g, h (llama)
            return jnp.einsum("bskgh,kghd->bsd", o, extra[-1])
        if proj == 2:  # reshaped to [B, S, KV*G*H] and multiplied
            return o.reshape(o.shape[0], o.shape[1], -1) @ extra[-1].reshape(-1, extra[-1].shape[-1])
        if proj == 3:  # contracting h alone
            return jnp.einsum("bskgh,kghd->bskgd", o, extra[-1])
        if proj == 4:  # an elementwise reader
            return (o.astype(jnp.float32) * 2).astype(o.dtype)
        return o
    return g


def fusions(text):
    """name -> body of each computation."""
    comps, cur = {}, None
    for l in text.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", l)
        if m:
            cur = m.group(1); comps[cur] = []
        elif cur:
            comps[cur].append(l)
    return comps


def flat(comps, name, depth=0):
    """The body of computation name with the bodies of the fusions it calls."""
    body = list(comps.get(name, []))
    for l in comps.get(name, []):
        m = re.search(r"calls=%?([\w.\-]+)", l)
        if m and depth < 4:
            body.append(flat(comps, m.group(1), depth + 1))
    return "\n".join(body)


def scores_shape(text, B, KV, G, S):
    """The layout the scores' producer (the QK^T kernel) writes: its result shapes holding B*KV*G*S*S bf16."""
    entry = text[text.rfind("\nENTRY"):]
    out = []
    for l in entry.splitlines():
        if "convolution" in l or "fusion(" in l:
            for sh in re.findall(r"bf16\[([\d,]+)\]", l.split("fusion(")[0].split("convolution(")[0]):
                d = [int(x) for x in sh.split(",")]
                n = 1
                for x in d: n *= x
                if n == B * KV * G * S * S and sorted(d) == sorted([B, KV, G, S, S]):
                    out.append(sh)
    return out


for case in CASES:
    mask, B, KV, G, S = case[:5]
    proj = len(case) > 5 and case[5]
    name = f"gqa_{mask}_b{B}kv{KV}g{G}s{S}{f'_proj{proj}' if proj else ''}"
    for chip in chips:
        sd = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=SingleDeviceSharding(device(chip)))
        q, kv = sd((B, S, KV, G, H), jnp.bfloat16), sd((B, S, KV, H), jnp.bfloat16)
        extra = {"pad": [sd((B, S), jnp.bool_)], "bias": [sd((B, 1, 1, S, S), jnp.float32)]}.get(mask, [])
        extra += [sd((KV, G, H, 512), jnp.bfloat16)] if proj in (1, 2, 3) else []
        low = jax.jit(f(mask, proj)).lower(q, kv, kv, *extra)
        open(os.path.join(out, name + ".hlo"), "w").write(low.compiler_ir("hlo").as_hlo_text())
        text = low.compile().as_text()
        open(os.path.join(out, f"{name}.{chip}.hlo"), "w").write(text)
        comps = fusions(text)
        entry = text[text.rfind("\nENTRY"):]
        verdict = None
        for l in entry.splitlines():
            m = re.search(r"calls=%?([\w.\-]+)", l)
            if not m or " fusion(" not in l or m.group(1) not in comps:
                continue
            body = flat(comps, m.group(1))
            if " divide(" not in body:
                continue
            mm = " convolution(" in body or " dot(" in body
            verdict = "in_pv" if mm else "own"
            print(json.dumps({"case": name, "chip": chip, "divide_kernel": l.split("=")[0].strip(),
                              "has_matmul": mm, "shape": l.split("=")[1].split("fusion(")[0].strip()[:60]}), flush=True)
        print(json.dumps({"case": name, "chip": chip, "verdict": verdict, "scores": scores_shape(text, B, KV, G, S)}), flush=True)
