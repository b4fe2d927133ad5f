#!/usr/bin/env python3
"""decode_pv.py GEN [OUT.jsonl]: one-query (decode) attention's p . v on the vector unit (a kLoop
multiply_reduce fusion whose vector p is spread along the lanes of v's d, summed over the keys):
the XLA TPU compiler's estimated_cycles for that kernel and tpusim's figure for the same kernel
of the compiled program (--compiled), with the rule of stream_cost.c dot_vector_reduce_rows on
and off (TPUSIM_NO_DOT_VECTOR_ROWS). Two sets, none of them a families program:
  "keys": p a bf16 parameter [12,8,1,k], 'bhqk,bkhd->bqhd' with v [12,k,kv,128], kv 8 or 1
          (broadcast over the heads), k = 17, 33, 64, 128, 256, 512 (the set the rule was read from);
  "attend": gen_families' attend (bf16 [b,1,h,d] queries, [b,k,kv,d] keys and values, the scale
          in bf16, an f32 softmax) with b, h, k, d and kv swept one at a time around b = 4,
          h = 16, k = 512, d = 128, kv = 1 (the check);
  "after": the same decode step at five shapes drawn after the rule was fixed, f32 and bf16
          (AFTER below; a held-out check).
Session 31 (bdot); data: data/decode_pv.jsonl, docs/timing-mxu.md."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core"}
BASE = dict(b=4, h=16, k=512, d=128, kv=1)
CASES = [dict(BASE)]
for key, vals in (("k", (128, 256, 1024)), ("h", (8, 32)), ("d", (64, 256)), ("b", (1, 2, 8)), ("kv", (4, 16))):
    for x in vals:
        CASES.append(dict(BASE, **{key: x}))


AFTER = [(dict(b=2, h=12, k=300, d=128, kv=1), "float32"), (dict(b=3, h=24, k=777, d=128, kv=4), "bfloat16"),
         (dict(b=6, h=8, k=100, d=128, kv=8), "bfloat16"), (dict(b=1, h=16, k=1500, d=128, kv=16), "float32"),
         (dict(b=16, h=16, k=4096, d=128, kv=1), "bfloat16")]


def program(dev, sz, dt=jnp.bfloat16):
    b, h, k, d, kv = sz["b"], sz["h"], sz["k"], sz["d"], sz["kv"]
    def f(q, kk, v):
        kk = jnp.repeat(kk, h // kv, axis=2)
        v = jnp.repeat(v, h // kv, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) * jnp.asarray(d ** -0.5, dt)
        p = jax.nn.softmax(s.astype(jnp.float32), -1).astype(dt)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v)
    args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in ((b, 1, h, d), (b, k, kv, d), (b, k, kv, d))]
    return jax.jit(f).lower(*args).compile().as_text()


def keys_program(dev, k, kv, dt=jnp.bfloat16):
    b, h = 12, 8
    f = lambda p, v: jnp.einsum("bhqk,bkhd->bqhd", p, jnp.repeat(v, h // kv, axis=2))
    args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in ((b, h, 1, k), (b, k, kv, 128))]
    return jax.jit(f).lower(*args).compile().as_text()


def pv_kernels(text):
    out = []
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        kind, cyc, on = (re.search(p, line) for p in (r"kind=(k\w+)", r'"estimated_cycles":"(\d+)"', r'op_name="([^"]*)"'))
        if kind and on and on.group(1).endswith("bhqk,bkhd->bqhd/dot_general"):
            out.append((re.match(r"\s*(?:ROOT )?%(\S+) =", line).group(1), kind.group(1), int(cyc.group(1)) if cyc else None))
    return out


def tpusim(text, gen, env=None):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                            "--quiet"], capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off", **(env or {})))
        if p.returncode:
            return None
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    keep = os.environ.get("DECODE_PV_KEEP")  # a folder for the compiled programs (re-timing without libtpu)
    dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
    work = [("keys", dict(b=12, h=8, k=k, d=128, kv=kv), lambda k=k, kv=kv: keys_program(dev, k, kv))
            for kv in (8, 1) for k in (17, 33, 64, 128, 256, 512)]
    work += [("attend", sz, lambda sz=sz: program(dev, sz)) for sz in CASES]
    work += [("after", dict(sz, dtype=dn), lambda sz=sz, dn=dn: program(dev, sz, getattr(jnp, dn))) for sz, dn in AFTER]
    only = os.environ.get("DECODE_PV_SETS")  # e.g. "after": run those sets only
    for set_, sz, make in work:
        if only and set_ not in only.split(","):
            continue
        text = make()
        if keep:
            os.makedirs(keep, exist_ok=True)
            name = "%s_%s_" % (gen, set_) + "_".join("%s%s" % (c, sz[c]) for c in sz)
            open(os.path.join(keep, name + ".hlo"), "w").write(text)
        found = pv_kernels(text)
        on, off = tpusim(text, gen) or {}, tpusim(text, gen, {"TPUSIM_NO_DOT_VECTOR_ROWS": "1"}) or {}
        rec = dict(gen=gen, set=set_, sizes=sz, xla=found, tpusim_compiled=[(n, on.get(n)) for n, _, _ in found],
                   tpusim_compiled_rule_off=[(n, off.get(n)) for n, _, _ in found])
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

if __name__ == "__main__":
    main()
