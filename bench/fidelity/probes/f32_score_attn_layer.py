#!/usr/bin/env python3
"""f32_score_attn_layer.py GEN B S DM HEADS: f32_score_attn.py's attention in a layer's context (q, k, v
from [DM,DM] projections of x, reshaped to heads and transposed; the output transposed back), as
gen.py's layer_fwd_* has it, with shapes off the corpora. Prints the compiler's entry kernels
(kind, op_name tail, estimated cycles) and tpusim's (cycles, DMA = dma-in + dma-out, vector =
vpu + eup + xlu, mxu). Output of the session-19 runs: data/f32_score_attn_layer.txt."""
import os, re, sys, json, subprocess, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import importlib.util
spec = importlib.util.spec_from_file_location("fa", os.path.join(os.path.dirname(os.path.abspath(__file__)), "f32_score_attn.py"))
fa = importlib.util.module_from_spec(spec); spec.loader.exec_module(fa)
import jax, jax.numpy as jnp
from jax.sharding import SingleDeviceSharding
from jax.experimental import topologies
gen, b, s, dm, heads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dev = topologies.get_topology_desc(platform="tpu", topology_name=fa.TOPO[gen]).devices[0]
def f(x, wq, wk, wv):
    dh = dm // heads
    q = (x @ wq).reshape(b, s, heads, dh).transpose(0, 2, 1, 3)
    k = (x @ wk).reshape(b, s, heads, dh).transpose(0, 2, 1, 3)
    v = (x @ wv).reshape(b, s, heads, dh).transpose(0, 2, 1, 3)
    return fa.attention(q, k, v, True).transpose(0, 2, 1, 3).reshape(b, s, dm)
shapes = [(b, s, dm), (dm, dm), (dm, dm), (dm, dm)]
args = [jax.ShapeDtypeStruct(sh, fa.BF, sharding=SingleDeviceSharding(dev)) for sh in shapes]
t = jax.jit(f).lower(*args).compile().as_text()
print("COMPILER", gen, b, s, dm, heads)
for line in t[t.rfind("\nENTRY"):].split("\n"):
    c = re.search(r'"estimated_cycles":"(\d+)"', line)
    if c: print("  ", line.split("=")[0].strip(), re.search(r'kind=(k\w+)', line).group(1) if 'kind=' in line else '', (re.search(r'op_name="([^"]*)"', line).group(1) if 'op_name' in line else '')[-40:], c.group(1))
hlo = jax.jit(f).lower(*[jax.ShapeDtypeStruct(sh, fa.BF) for sh in shapes]).as_text(dialect="hlo", debug_info=True)
with tempfile.TemporaryDirectory() as d:
    open(d + "/p.hlo", "w").write(hlo)
    subprocess.run([fa.TPUSIM, "run", d + "/p.hlo", "--mode", "timing", "--chip", fa.PRESET.get(gen, gen), "--report", d + "/r.json", "--quiet"], check=True, env=dict(os.environ, TPUSIM_CACHE="off"))
    r = json.load(open(d + "/r.json"))
print("TPUSIM")
for o in r["ops"]:
    u = o["unit_cycles"]
    print("  ", o["name"], o["kind"], o.get("op_name", "")[-40:], o["cycles"], "dma", u["dma-in"] + u["dma-out"], "vec", u["vpu"] + u["eup"] + u["xlu"], "mxu", u["mxu"])
