#!/usr/bin/env python3
"""softmax_start.py GEN [OUT.jsonl]: small softmax-like vector kernels (reduce max, exp, reduce sum,
divide over rows) as the XLA TPU compiler compiles them, every kernel's estimated_cycles against
tpusim's figure for the same kernel of the compiled program (--compiled), with and without the
experiment TPUSIM_EXP_RWL=1 (layout.c pool_window: a reduce-window over a whole minor row, the
compiler's EmitReduceWindowLane / EmitReduceWindowSublane, timed as a pooling window kernel with
window_start_cycles; NOT landed, see /work/notes/s31/smallvec.report.md). Sets, none a families
program:
  "rows":   jax.nn.softmax over the last axis of [R, L], R 8-512 rows, L 77-2048 lanes, f32/bf16;
  "decode": one-query attention (q [b,1,h,d], k/v [b,k,kv,d]) with an f32 softmax, b 1-16,
            h 8-16, k 77-2048, kv 1 or h, bf16/f32.
Session 31 (smallvec); data: data/softmax_start.jsonl, docs/timing.md (kernel start)."""
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
ROWS = [(8, 77, "float32"), (64, 77, "bfloat16"), (96, 128, "float32"), (512, 200, "bfloat16"),
        (16, 2048, "float32"), (128, 1000, "bfloat16"), (32, 300, "float32"), (256, 77, "float32")]
DECODE = [dict(b=8, h=8, k=77, d=128, kv=8, dt="float32"), dict(b=2, h=12, k=128, d=64, kv=12, dt="bfloat16"),
          dict(b=4, h=16, k=300, d=128, kv=1, dt="bfloat16"), dict(b=1, h=8, k=2048, d=128, kv=8, dt="bfloat16"),
          dict(b=16, h=8, k=77, d=64, kv=1, dt="bfloat16"), dict(b=4, h=12, k=1000, d=128, kv=12, dt="float32")]


def rows_program(dev, r, l, dt):
    f = lambda x: jax.nn.softmax(x, -1)
    return jax.jit(f).lower(jax.ShapeDtypeStruct((r, l), getattr(jnp, dt), sharding=SingleDeviceSharding(dev))).compile().as_text()


def decode_program(dev, sz):
    b, h, k, d, kv, dt = sz["b"], sz["h"], sz["k"], sz["d"], sz["kv"], getattr(jnp, sz["dt"])
    def f(q, kk, v):
        kk = jnp.repeat(kk, h // kv, axis=2)
        v = jnp.repeat(v, h // kv, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) * jnp.asarray(d ** -0.5, dt)
        p = jax.nn.softmax(s.astype(jnp.float32), -1).astype(dt)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v)
    args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in ((b, 1, h, d), (b, k, kv, d), (b, k, kv, d))]
    return jax.jit(f).lower(*args).compile().as_text()


def kernels(text):
    out = []
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        m = re.match(r"\s*(?:ROOT )?%(\S+) =", line)
        if cyc and m:
            out.append((m.group(1), int(cyc.group(1))))
    return out


def emitters(text):
    """[name, emitter, iteration_bounds] of the entry's window-emitter kernels."""
    out = []
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        m, e, b = (re.search(p, line) for p in (r"\s*(?:ROOT )?%(\S+) =", r'"emitter":"(\w+)"', r'"iteration_bounds":\[([^\]]*)\]'))
        if m and e:
            out.append((m.group(1), e.group(1), b.group(1).replace('"', "") if b else ""))
    return out


def tpusim(text, gen, env=None):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                            "--quiet"], capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off", **(env or {})))
        if p.returncode:
            return {}
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    keep = os.environ.get("SOFTMAX_START_KEEP")  # a folder for the compiled programs (re-timing without libtpu)
    dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
    work = [("rows", dict(r=r, l=l, dt=dt), lambda r=r, l=l, dt=dt: rows_program(dev, r, l, dt)) for r, l, dt in ROWS]
    work += [("decode", sz, lambda sz=sz: decode_program(dev, sz)) for sz in DECODE]
    only = os.environ.get("SOFTMAX_START_SETS")
    for set_, sz, make in work:
        if only and set_ not in only.split(","):
            continue
        text = make()
        if keep:
            os.makedirs(keep, exist_ok=True)
            name = "%s_%s_" % (gen, set_) + "_".join("%s%s" % (c, sz[c]) for c in sz)
            open(os.path.join(keep, name + ".hlo"), "w").write(text)
        found = kernels(text)
        on, off = tpusim(text, gen, {"TPUSIM_EXP_RWL": "1"}), tpusim(text, gen)
        rec = dict(gen=gen, set=set_, sizes=sz, xla=found, emitters=emitters(text), tpusim_compiled=[(n, on.get(n)) for n, _ in found],
                   tpusim_compiled_rule_off=[(n, off.get(n)) for n, _ in found])
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
