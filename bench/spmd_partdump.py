#!/usr/bin/env python3
"""spmd_partdump.py: the judge's partitioning alone, for bench/spmd_compare.py's step column.

A real compiler's final program (`opt.hlo`, `tpu.hlo`) differs from tpusim's in two ways at
once: how it was partitioned, and how the compiler then fused, laid out and scheduled it for
its own target (XLA CPU fuses for a CPU). To compare partitioning alone, this script compiles
each case's `prog.hlo` again with the same compiler and keeps the program right after its SPMD
partitioner (`--xla_dump_hlo_pass_re=spmd-partitioning`, the dump named
`*after_spmd-partitioning*`): partitioned, with the judge's collectives, not yet optimized.
bench/spmd_compare.py then compiles it with tpusim's own pipeline, so both sides of the step
column share tpusim's fusion and timing and differ only in partitioning.

    python3 bench/spmd_partdump.py tests/pod/cases        # XLA CPU: writes CASE/xla_part.hlo
    python3 bench/spmd_partdump.py --tpu tests/tpu/cases  # XLA TPU compiler (libtpu): tpu_part.hlo

Run by hand (needs jax; --tpu needs jax[tpu]); its outputs are committed. Cases that are
not partitioned by the compiler (num_partitions 1: replicas written per device) are skipped.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r'''
import glob, json, os, sys
import numpy as np
case, dump, tpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import jax
from jax._src.lib import hlo as xhlo, xla_client as xc
meta = json.load(open(os.path.join(case, "meta.json")))
n = meta.get("num_partitions") or meta["devices"]
if tpu:
    from jax.experimental import topologies
    devs = list(topologies.get_topology_desc(platform="tpu", topology_name=meta["topology"]).devices)[:n]
else:
    devs = jax.devices()[:n]
order = meta.get("device_assignment") or list(range(n))
# shard_map programs: XLA's own partitioner reads the GSPMD form (Sharding and
# SPMDFullToShardShape custom calls), not Shardy's xla.sdy.* markers
src = next(p for p in ("prog_gspmd.hlo", "prog.hlo") if os.path.exists(os.path.join(case, p)))
text = open(os.path.join(case, src)).read()
# the output shardings JAX compiled with (jit passes them beside the text): on the entry's ROOT
outs = [o["hlo_sharding"] for o in meta.get("outputs", [])] or meta.get("out_shardings") or []
entry = text.rfind("\nENTRY")
root = text.find("ROOT ", entry)
eol = text.find("\n", root)
if outs and root > 0 and "sharding=" not in text[root:eol]:
    multi = len(outs) > 1 or "(" in text[root:eol].split("=", 1)[1].split(" ", 2)[1]
    sh = "{" + ", ".join(outs) + "}" if multi else outs[0]
    text = text[:eol] + ", sharding=" + sh + text[eol:]
mod = xhlo.hlo_module_from_text(text)
proto = mod.as_serialized_hlo_module_proto()
opts = xc.CompileOptions()
eb = opts.executable_build_options
eb.num_partitions, eb.num_replicas = n, 1
eb.use_spmd_partitioning = True
if tpu:  # libtpu takes no dump flags from its environment: per-compile debug options
    opts.env_option_overrides = [("xla_dump_to", dump), ("xla_dump_hlo_pass_re", "spmd-partitioning"),
                                 ("xla_dump_large_constants", True)]
eb.device_assignment = xc.DeviceAssignment.create(np.array([devs[i].id for i in order]).reshape(1, n))
shlo = xc._xla.mlir.hlo_to_stablehlo(proto)
if tpu:
    from jax._src.interpreters import mlir
    with mlir.make_ir_context():
        from jax._src.lib.mlir import ir
        devs[0].client.compile(ir.Module.parse(shlo), executable_devices=xc.DeviceList(tuple(devs)),
                               compile_options=opts)
else:
    devs[0].client.compile_and_load(shlo, xc.DeviceList(tuple(devs)), opts)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("--tpu", action="store_true", help="the XLA TPU compiler (libtpu, compile-only)")
    a = ap.parse_args()
    out_name = "tpu_part.hlo" if a.tpu else "xla_part.hlo"
    done = skipped = 0
    for case in sorted(glob.glob(os.path.join(a.cases, "*", ""))):
        case = case.rstrip("/")
        name = os.path.basename(case)
        if not os.path.exists(os.path.join(case, "prog.hlo")) or not os.path.exists(os.path.join(case, "meta.json")):
            continue
        meta = json.load(open(os.path.join(case, "meta.json")))
        if (meta.get("num_partitions") or meta.get("devices", 1)) <= 1 or meta.get("num_replicas", 1) > 1:
            skipped += 1
            continue
        dump = tempfile.mkdtemp(prefix="partdump.")
        env = dict(os.environ)
        flags = f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=spmd-partitioning"
        if a.tpu:
            env.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
        else:
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=8 {flags}"
        env.setdefault("JAX_PLATFORMS", "cpu" if not a.tpu else "")
        r = subprocess.run([sys.executable, "-c", CHILD, case, dump, "1" if a.tpu else "0"],
                           capture_output=True, text=True, env=env)
        found = sorted(glob.glob(os.path.join(dump, "*after_*spmd-partitioning.before*")))
        if r.returncode != 0 or not found:
            print(f"{name}: no partitioned dump ({(r.stderr.strip().splitlines() or ['?'])[-1][:200]})")
        else:
            shutil.copy(found[-1], os.path.join(case, out_name))
            done += 1
            print(f"{name}: {out_name}")
        shutil.rmtree(dump, ignore_errors=True)
    print(f"{done} written, {skipped} not partitioned by the compiler (skipped)")


if __name__ == "__main__":
    main()
