#!/usr/bin/env python3
"""plan_memory.py: tpusim's per-device HBM accounting against the XLA TPU compiler's own
(`memory_analysis()` of libtpu in compile-only mode: argument, output, temp and alias bytes).

    python3 bench/plan_memory.py --tpusim build/tpusim [--markdown]     # seconds; no libtpu
    python3 bench/plan_memory.py --write-programs                       # the planner programs
    nice python3 bench/plan_memory.py --judge [--timeout S] [NAME_SUBSTRING...]   # libtpu: 5-60 s each

The corpus, per-device programs:
  - spmd/NAME: bench/spmd/cases/NAME/tpu_part.hlo, the XLA TPU compiler's partitioned program
    (before its optimisations) of each case; the judge compiles the case's prog.hlo with its
    shardings over the case's topology, which partitions it the same way;
  - plan/NAME: bench/plan_memory/NAME.hlo, training steps written by the planner's generator
    (tools/plan/gen.py) for cut-down published shapes on 8-chip slices; the judge compiles each
    as written (a per-device program: every value replicated over num_partitions).
The judge's figures are stored in bench/plan_memory/judge.json with the libtpu version, so
this script needs no libtpu unless --judge is given. Asynchronous collectives in the planner
programs are written synchronous for both sides (gen's overlap off), and without donating the
train state (the planner's own programs donate it: input_output_alias): libtpu's StableHLO path
does not take the async forms, and `copy` becomes `bitcast` for the judge (its MLIR import
refuses mhlo.copy; XLA removes such copies anyway). MoE steps are left out: libtpu's HLO
parser refuses the generator's all-to-all (use_global_device_ids).

Figures per program: total = argument + output + temp − alias bytes (what the device must
hold), tpusim's from `tpusim compile --emit asm` (.program hbm_arg/hbm_out/hbm_temp/
hbm_alias). Programs are split tune/test by a hash of the name (sha1, even first byte: tune):
nothing in tpusim is fitted to this corpus, but any rule checked against it is checked on the
tune half and reported on the test half first."""
import argparse
import glob
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PDIR = os.path.join(HERE, "plan_memory")
JUDGE = os.path.join(PDIR, "judge.json")
SPMD = os.path.join(HERE, "spmd", "cases")

# The planner programs: (name, model file, overrides, candidate, topology). Shapes are the
# published ones cut to a few layers and a batch that fits 8 chips.
PLAN = [
    ("llama7b_L2_1x8x1_remat", "llama_7b.json", {"layers": 2, "batch_tokens": 8 * 2048},
     {"data": 1, "fsdp": 8, "tensor": 1, "micro": 1, "remat": True}, "v5e:2x4"),
    ("llama7b_L2_1x8x1_noremat", "llama_7b.json", {"layers": 2, "batch_tokens": 8 * 2048},
     {"data": 1, "fsdp": 8, "tensor": 1, "micro": 1, "remat": False}, "v5e:2x4"),
    ("llama7b_L4_1x4x2_mb2", "llama_7b.json", {"layers": 4, "batch_tokens": 16 * 2048},
     {"data": 1, "fsdp": 4, "tensor": 2, "micro": 2, "remat": True}, "v5e:2x4"),
    ("llama7b_L2_2x2x2_noremat", "llama_7b.json", {"layers": 2, "batch_tokens": 8 * 2048},
     {"data": 2, "fsdp": 2, "tensor": 2, "micro": 1, "remat": False}, "v5e:2x4"),
    ("mt32b_L2_1x2x4_noremat", "maxtext_32b.json", {"layers": 2, "batch_tokens": 8 * 2048},
     {"data": 1, "fsdp": 2, "tensor": 4, "micro": 1, "remat": False}, "v5p:2x2x2"),
    ("mt32b_L4_1x8x1_remat", "maxtext_32b.json", {"layers": 4, "batch_tokens": 16 * 2048},
     {"data": 1, "fsdp": 8, "tensor": 1, "micro": 1, "remat": True}, "v5p:2x2x2"),
    ("mt22b_L3_1x8x1_remat_mb2", "maxtext_22b.json", {"layers": 3, "batch_tokens": 32 * 2048},
     {"data": 1, "fsdp": 8, "tensor": 1, "micro": 2, "remat": True}, "v5p:2x2x2"),
    ("gpt3_L2_1x2x4_remat", "gpt3_175b.json", {"layers": 2, "batch_tokens": 4 * 2048},
     {"data": 1, "fsdp": 2, "tensor": 4, "micro": 1, "remat": True}, "v5p:2x2x2"),
    ("llama70b_L2_1x4x2_noremat", "llama_70b.json", {"layers": 2, "batch_tokens": 4 * 4096},
     {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": False}, "v5p:2x2x2"),
    ("llama70b_L3_1x8x1_remat_mb4", "llama_70b.json", {"layers": 3, "batch_tokens": 32 * 4096},
     {"data": 1, "fsdp": 8, "tensor": 1, "micro": 4, "remat": True}, "v5p:2x2x2"),
    ("llama7b_L2_8x1x1_noremat_sgd", "llama_7b.json", {"layers": 2, "batch_tokens": 8 * 2048, "optimizer": "sgd"},
     {"data": 8, "fsdp": 1, "tensor": 1, "micro": 1, "remat": False}, "v5e:2x4"),
]
CHIP = {"v5e:2x4": "v5e", "v5e:4x4": "v5e", "v5p:2x2x2": "v5p"}


def split(name):
    return "tune" if hashlib.sha1(name.encode()).digest()[0] % 2 == 0 else "test"


def write_programs():
    sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
    import gen
    import plan as P
    os.makedirs(PDIR, exist_ok=True)
    for name, mf, over, cand, topo in PLAN:
        m = P.load_model(os.path.join(HERE, "plan_models", mf))
        m.update(over)
        st = gen.Step(m, dict(cand, overlap=False, windowed=False, donate=False, attention="dot_product", causal=False, layouts=False))
        why = st.check()
        if why:
            sys.exit(f"{name}: {why}")
        with open(os.path.join(PDIR, name + ".hlo"), "w") as fh:
            fh.write(st.module())
        meta = {"model": mf, "overrides": over, "candidate": cand, "topology": topo, "chip": CHIP[topo],
                "devices": 8}
        with open(os.path.join(PDIR, name + ".json"), "w") as fh:
            json.dump(meta, fh, indent=1)
        print(f"plan/{name}: written")


def corpus():
    """[(name, tpusim program path, chip, judge kind, judge input path, topology, devices)]."""
    out = []
    for d in sorted(glob.glob(os.path.join(SPMD, "*", ""))):
        d = d.rstrip("/")
        part = os.path.join(d, "tpu_part.hlo")
        if not os.path.exists(part):
            continue
        meta = json.load(open(os.path.join(d, "meta.json")))
        out.append(("spmd/" + os.path.basename(d), part, meta["chip"], "spmd", d, meta["topology"],
                    meta.get("num_partitions") or meta["devices"]))
    for p in sorted(glob.glob(os.path.join(PDIR, "*.hlo"))):
        meta = json.load(open(p[:-4] + ".json"))
        out.append(("plan/" + os.path.basename(p)[:-4], p, meta["chip"], "plan", p, meta["topology"], meta["devices"]))
    return out


CHILD = r'''
import json, os, re, sys
import numpy as np
import jax
from jax._src.lib import hlo as xhlo, xla_client as xc
from jax.experimental import topologies
from jax._src.interpreters import mlir
kind, src, topo, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
devs = list(topologies.get_topology_desc(platform="tpu", topology_name=topo).devices)[:n]
order = list(range(n))
if kind == "spmd":  # as bench/spmd_partdump.py: the case's program with its output shardings
    meta = json.load(open(os.path.join(src, "meta.json")))
    order = meta.get("device_assignment") or order
    f = next(p for p in ("prog_gspmd.hlo", "prog.hlo") if os.path.exists(os.path.join(src, p)))
    text = open(os.path.join(src, f)).read()
    outs = [o["hlo_sharding"] for o in meta.get("outputs", [])] or meta.get("out_shardings") or []
    entry = text.rfind("\nENTRY")
    root = text.find("ROOT ", entry)
    eol = text.find("\n", root)
    if outs and root > 0 and "sharding=" not in text[root:eol]:
        multi = len(outs) > 1 or "(" in text[root:eol].split("=", 1)[1].split(" ", 2)[1]
        sh = "{" + ", ".join(outs) + "}" if multi else outs[0]
        text = text[:eol] + ", sharding=" + sh + text[eol:]
else:
    text = re.sub(r" copy\(", " bitcast(", open(src).read())
mod = xhlo.hlo_module_from_text(text)
opts = xc.CompileOptions()
eb = opts.executable_build_options
eb.num_partitions, eb.num_replicas = n, 1
eb.use_spmd_partitioning = True
eb.device_assignment = xc.DeviceAssignment.create(np.array([devs[i].id for i in order]).reshape(1, n))
shlo = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
with mlir.make_ir_context():
    from jax._src.lib.mlir import ir
    exe = devs[0].client.compile(ir.Module.parse(shlo), executable_devices=xc.DeviceList(tuple(devs)),
                                 compile_options=opts)
ms = exe.get_compiled_memory_stats()
print("JUDGE " + json.dumps({"arg": ms.argument_size_in_bytes, "out": ms.output_size_in_bytes,
                             "temp": ms.temp_size_in_bytes, "alias": ms.alias_size_in_bytes,
                             "host_temp": ms.host_temp_size_in_bytes, "peak": ms.peak_memory_in_bytes,
                             "jax": jax.__version__}))
'''


def judge(subs, timeout=None):
    j = json.load(open(JUDGE)) if os.path.exists(JUDGE) else {}
    env = dict(os.environ)
    env.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    for name, _, _, kind, src, topo, n in corpus():
        if subs and not any(s in name for s in subs):
            continue
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, kind, src, topo, str(n)], capture_output=True, text=True,
                               env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{name}: no judge (libtpu did not finish in {timeout} s)")
            continue
        line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
        if not line:
            err = [x for x in r.stderr.strip().splitlines() if "Error" in x or "error" in x]
            print(f"{name}: no judge ({(err or ['?'])[-1][:200]})")
            continue
        j[name] = json.loads(line[6:])
        print(f"{name}: {j[name]}")
        with open(JUDGE + ".tmp", "w") as fh:
            json.dump(j, fh, indent=1, sort_keys=True)
        os.replace(JUDGE + ".tmp", JUDGE)


def tpusim_mem(tpusim, path, chip):
    r = subprocess.run([tpusim, "compile", path, "--emit", "asm", "--chip", chip], capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    line = next((x for x in r.stdout.splitlines() if x.startswith(".program")), "")
    f = {k: int(v) for k, v in re.findall(r"(hbm_\w+)=(\d+)", line)}
    return {"arg": f.get("hbm_arg", 0), "out": f.get("hbm_out", 0), "temp": f.get("hbm_temp", 0),
            "alias": f.get("hbm_alias", 0), "footprint": f.get("hbm_footprint", 0)}, None


def total(x):
    return x["arg"] + x["out"] + x["temp"] - x["alias"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--judge", action="store_true", help="recompute the judge's figures with libtpu")
    ap.add_argument("--timeout", type=float, help="--judge: seconds per program before it is left without a figure")
    ap.add_argument("--write-programs", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true", help="the per-program figures as JSON")
    a = ap.parse_args()
    if a.write_programs:
        write_programs()
        return 0
    if a.judge:
        judge(a.names, a.timeout)
        return 0
    j = json.load(open(JUDGE))
    rows = []
    for name, path, chip, *_ in corpus():
        if a.names and not any(s in name for s in a.names):
            continue
        if name not in j:
            continue
        t, err = tpusim_mem(a.tpusim, path, chip)
        if t is None:
            print(f"{name}: tpusim failed: {err}", file=sys.stderr)
            continue
        x = j[name]
        rows.append({"name": name, "split": split(name), "tpusim": t, "judge": x,
                     "err": total(t) / total(x) - 1 if total(x) else 0.0,
                     "temp_err": (t["temp"] - x["temp"]) / total(x) if total(x) else 0.0})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    mb = lambda v: f"{v / 2**20:.1f}"  # noqa: E731
    for part in ("test", "tune"):
        rs = [r for r in rows if r["split"] == part]
        if not rs:
            continue
        errs = [abs(r["err"]) for r in rs]
        within = sum(e <= 0.10 for e in errs)
        print(f"{part} split: {len(rs)} programs, |total error| median {100 * statistics.median(errs):.1f} %, "
              f"worst {100 * max(errs):.1f} %, within 10 %: {within}/{len(rs)}")
        if a.markdown:
            print("\n| program | arg MiB tpusim / XLA | out | temp | alias | total | error |\n|---|---|---|---|---|---|---|")
        for r in sorted(rs, key=lambda r: r["name"]):
            t, x = r["tpusim"], r["judge"]
            cells = [f"{mb(t[k])} / {mb(x[k])}" for k in ("arg", "out", "temp", "alias")] + \
                    [f"{mb(total(t))} / {mb(total(x))}", f"{100 * r['err']:+.1f} %"]
            if a.markdown:
                print(f"| {r['name']} | " + " | ".join(cells) + " |")
            else:
                print(f"  {r['name']:<36} " + "  ".join(cells))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
