#!/usr/bin/env python3
"""plan_xla.py: a MaxText row's per-chip training step (bench/plan_maxtext.py's rows, as the
planner writes it) compiled by the XLA TPU compiler (libtpu, compile-only) with MaxText's
flags, against tpusim: the compiler's schedule of the collectives (which stay synchronous,
which run inside kernels), its estimated cycles by kind of kernel, its memory_analysis();
and tpusim's timing and memory of the same program. A judge for any configuration.

    nice python3 bench/plan_xla.py maxtext_32b [--layers 2] [--flags maxtext|none] [--megacore]
                                   [--tpusim build/tpusim] [--keep DIR]

The program is the row's own (published mesh, per-device batch, remat policy) cut to
--layers layers (every layer is the same loop iteration), written with synchronous gathers, the
scan stacks zero-filled and no donation (libtpu's StableHLO import takes neither the async forms nor the alias
table); `copy` becomes `bitcast` for the compiler (its MLIR import refuses mhlo.copy).
Compiling takes minutes (1-5 on this machine under load). The compiler gives collectives no
estimated cycles, so its sums are compute only."""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(HERE, "fidelity"))  # after tools/plan: its gen.py is not the planner's
import gen  # noqa: E402
from compare import computations  # noqa: E402  (the HLO text splitter; the entry is "ENTRY")
import plan as P  # noqa: E402
import plan_maxtext as MX  # noqa: E402

# MaxText's LIBTPU_INIT_ARGS of configs/v5p/32b.sh (the v5p rows; the v4 and v5e scripts set
# fewer): async collective fusion (all-gathers too, several steps), compute/collective
# overlap, async all-gather and collective-permute, the data-parallel all-reduce rewrite.
MAXTEXT_FLAGS = ("--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true --xla_tpu_megacore_fusion_allow_ags=false "
                 "--xla_enable_async_collective_permute=true --xla_tpu_enable_ag_backward_pipelining=true "
                 "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
                 "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
                 "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true")
TOPO = {("v5p", 64): "v5p:4x4x4", ("v5p", 128): "v5p:4x4x8", ("v5p", 512): "v5p:8x8x8", ("v4", 64): "v4:4x4x4",
        ("v4", 192): "v4:4x4x12", ("v5e", 256): "v5e:16x16"}
CLOCK = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9}

CHILD = r'''
import json, re, sys
import numpy as np
import jax
from jax._src.lib import hlo as xhlo, xla_client as xc
from jax.experimental import topologies
from jax._src.interpreters import mlir
src, topo, n, out, cfg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
kw = {"chip_config_name": cfg} if cfg else {}
devs = list(topologies.get_topology_desc(platform="tpu", topology_name=topo, **kw).devices)[:n]
mod = xhlo.hlo_module_from_text(re.sub(r" copy\(", " bitcast(", open(src).read()))
opts = xc.CompileOptions()
eb = opts.executable_build_options
eb.num_partitions, eb.num_replicas = n, 1
eb.use_spmd_partitioning = True
eb.device_assignment = xc.DeviceAssignment.create(np.array([d.id for d in devs]).reshape(1, n))
shlo = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
with mlir.make_ir_context():
    from jax._src.lib.mlir import ir
    exe = devs[0].client.compile(ir.Module.parse(shlo), executable_devices=xc.DeviceList(tuple(devs)),
                                 compile_options=opts)
open(out, "w").write(exe.hlo_modules()[0].to_string() if hasattr(exe, "hlo_modules") else exe.as_text())
ms = exe.get_compiled_memory_stats()
print("JUDGE " + json.dumps({"arg": ms.argument_size_in_bytes, "out": ms.output_size_in_bytes,
                             "temp": ms.temp_size_in_bytes, "alias": ms.alias_size_in_bytes}))
'''


def kind(comps, line):
    """A scheduled instruction's kind: matmul (a fusion holding a convolution), collective
    (synchronous), async collective (a fusion running one inside a kernel, or -start/-done),
    vector (other fusions and ops)."""
    op = re.search(r"= (?:\([^=]*\)|\S+) ([\w-]+)\(", line)
    op = op.group(1) if op else "?"
    body = "\n".join(sum((comps.get(c, []) for c in re.findall(r"calls=%([\w.\-]+)", line)), []))
    if op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"):
        return "collective (synchronous)"
    if op.endswith("-start") or op.endswith("-done") or "AsyncCollective" in line or "async_collective_fusion" in line:
        return "matmul + async collective" if "convolution(" in body else "async collective"
    if op == "fusion":
        return "matmul" if "convolution(" in body else "vector/memory"
    if op == "convolution":
        return "matmul"
    return "vector/memory"


def analyse(text, loops):
    """Per computation the schedule's figures: (name, times it runs, estimated cycles by kind,
    instructions by kind, the synchronous collectives); loops: the generator's loop names ->
    trip counts (the compiler's while loops keep them as op_name metadata)."""
    comps = computations(text)
    entry = "ENTRY"
    out = []

    def walk(name, trips):
        cyc, n = collections.Counter(), collections.Counter()
        sync = []
        for line in comps[name]:
            k = kind(comps, line)
            c = re.search(r'"estimated_cycles":"(\d+)"', line)
            if c:
                cyc[k] += int(c.group(1))
            n[k] += 1
            if k == "collective (synchronous)":
                sync.append(re.match(r"\s*(?:ROOT )?%(\S+)", line).group(1))
            if " while(" in line:
                b = re.search(r"body=%([\w.\-]+)", line).group(1)
                loop = re.search(r'op_name="(\w+)"', line)
                walk(b, trips * loops.get(loop.group(1) if loop else "", 1))
        out.append((name, trips, cyc, n, sync))
    walk(entry, 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("row")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--flags", choices=("maxtext", "none"), default="maxtext")
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--keep", help="directory to keep the program and the compiler's output in")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--megacore", action="store_true",
                    help="v4: compile for the chip as one megacore device (libtpu's chip_config_name "
                         "'megacore', as MaxText's v4 scripts run it: TPU_MEGACORE) instead of one TensorCore")
    a = ap.parse_args()
    row = next((r for r in MX.ROWS if r[0] == a.row), None)
    if not row:
        sys.exit(f"plan_xla.py: no row {a.row} (rows: {', '.join(r[0] for r in MX.ROWS)})")
    name, chip, n, t, remat = row[:5]
    m = MX.row_model(name, n)  # the program of the row's published run
    m["layers"] = a.layers
    cand = {"data": 1, "fsdp": n // t, "tensor": t, "micro": 1, "remat": remat, "windowed": False, "overlap": False, "alloc": False,
            "donate": False, "kernel": False, "tp_windowed": False}
    d = a.keep or tempfile.mkdtemp(prefix="plan_xla_")
    os.makedirs(d, exist_ok=True)
    prog, opt = os.path.join(d, name + ".hlo"), os.path.join(d, name + ".xla.hlo")
    with open(prog, "w") as fh:
        fh.write(gen.Step(m, cand).module())
    env = dict(os.environ, TPU_ACCELERATOR_TYPE=os.environ.get("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
               ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    if a.flags == "maxtext":
        env["LIBTPU_INIT_ARGS"] = MAXTEXT_FLAGS
    r = subprocess.run([sys.executable, "-c", CHILD, prog, TOPO[(chip, n)], str(n), opt,
                        "megacore" if a.megacore else ""], capture_output=True, text=True,
                       env=env, timeout=a.timeout)
    line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
    if not line:
        sys.exit(f"plan_xla.py: libtpu did not compile {prog}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    judge = json.loads(line[6:])
    print(f"{name}: {chip}, {n} chips, mesh 1x{n // t}x{t}, remat {remat}, {a.layers} layers; flags {a.flags}")
    print("the XLA TPU compiler (libtpu, compile-only): estimated cycles by kind, per loop body (compute only)")
    clock = CLOCK[chip]
    step = 0
    for comp, trips, cyc, cnt, sync in analyse(open(opt).read(), {"floop": a.layers, "bloop": a.layers}):
        tot = sum(cyc.values())
        step += trips * tot
        print(f"  {comp} (runs {trips}x): {tot / clock * 1e3:.1f} ms = " +
              ", ".join(f"{k} {v / clock * 1e3:.1f} ms ({cnt[k]})" for k, v in cyc.most_common()))
        if sync:
            print(f"    synchronous collectives: {', '.join(sync)}")
    print(f"  the step's compute as the compiler estimates it: {step / clock * 1e3:.1f} ms")
    tot = judge["arg"] + judge["out"] + judge["temp"] - judge["alias"]
    print(f"  memory_analysis: argument {judge['arg'] / 1e9:.3f} GB, output {judge['out'] / 1e9:.3f} GB, temp "
          f"{judge['temp'] / 1e9:.3f} GB, alias {judge['alias'] / 1e9:.3f} GB: {tot / 1e9:.3f} GB")
    r = subprocess.run([a.tpusim, "run", prog, "--mode", "timing", "--chip", chip], capture_output=True, text=True)
    for x in r.stdout.splitlines():
        if x.startswith(("step time", "breakdown", "communication")):
            print("tpusim: " + x)
    r = subprocess.run([a.tpusim, "compile", prog, "--emit", "asm", "--chip", chip], capture_output=True, text=True)
    f = {k: int(v) for k, v in re.findall(r"(hbm_\w+)=(\d+)", r.stdout)}
    if f:
        tt = f["hbm_arg"] + f["hbm_out"] + f["hbm_temp"] - f["hbm_alias"]
        print(f"tpusim memory: argument {f['hbm_arg'] / 1e9:.3f} GB, output {f['hbm_out'] / 1e9:.3f} GB, temp "
              f"{f['hbm_temp'] / 1e9:.3f} GB: {tt / 1e9:.3f} GB ({100 * (tt / tot - 1):+.1f} % against the compiler)")
    else:
        print("tpusim memory: " + (r.stderr.strip().splitlines() or ["?"])[-1])


if __name__ == "__main__":
    main()
