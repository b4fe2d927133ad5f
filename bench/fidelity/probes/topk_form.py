#!/usr/bin/env python3
"""topk_form.py: which form the XLA TPU compiler gives lax.top_k (an HLO `topk`): its TopK
custom-call kernel, or XLA's decomposition (iota + sort + slices), by shape. libtpu
compile-only (the same calls as /work/shared/tools/tpu_compile.py), shapes drawn outside the
families corpus.

    python3 bench/fidelity/probes/topk_form.py CHIP B1,B2,.. N1,N2,.. K1,K2,.. DTYPE
prints one line per shape: chip b n k dtype form (topk | sort | other)."""
import os, re, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
from jax.experimental import topologies
from jax._src.lib import hlo as xhlo, xla_client as xc
from jax._src.interpreters import mlir
from jax._src import compiler

TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}


def hlo(b, n, k, dt):
    return (f"HloModule p, entry_computation_layout={{({dt}[{b},{n}]{{1,0}})->({dt}[{b},{k}]{{1,0}}, s32[{b},{k}]{{1,0}})}}\n\n"
            f"ENTRY main {{\n  x = {dt}[{b},{n}]{{1,0}} parameter(0)\n"
            f"  t = ({dt}[{b},{k}]{{1,0}}, s32[{b},{k}]{{1,0}}) topk(x), k={k}, largest=true\n"
            f"  v = {dt}[{b},{k}]{{1,0}} get-tuple-element(t), index=0\n"
            f"  i = s32[{b},{k}]{{1,0}} get-tuple-element(t), index=1\n"
            f"  ROOT r = ({dt}[{b},{k}]{{1,0}}, s32[{b},{k}]{{1,0}}) tuple(v, i)\n}}\n")


def form(dev, text):
    mod = xhlo.hlo_module_from_text(text)
    shlo = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
    with mlir.make_ir_context():
        from jax._src.lib.mlir import ir
        module = ir.Module.parse(shlo)
        opts = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        exe = dev.client.compile(module, executable_devices=xc.DeviceList((dev,)), compile_options=opts)
    out = exe.hlo_modules()[0].to_string() if hasattr(exe, "hlo_modules") else exe.as_text()
    if 'custom_call_target="TopK"' in out:
        return "topk"
    if re.search(r"\ssort\(", out):
        return "sort"
    return "other"


def main():
    chip, bs, ns, ks, dt = sys.argv[1:6]
    dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[chip]).devices[0]
    for b in map(int, bs.split(",")):
        for n in map(int, ns.split(",")):
            for k in map(int, ks.split(",")):
                if k > n:
                    continue
                print(chip, b, n, k, dt, form(dev, hlo(b, n, k, dt)), flush=True)


if __name__ == "__main__":
    main()
