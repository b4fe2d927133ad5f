#!/usr/bin/env python3
"""scan_window.py 'CASES_JSON' GENS: the XLA TPU compiler's plan for a scan's window kernel
(needs libtpu). CASES_JSON is a list of [shape, axis, dtype?, op?, reverse?] (dtype s32 or f32,
op minimum, add or maximum); GENS e.g. v4,v5p. For each case compiles a reduce-window over the
whole of that axis, padded by its length less one (jnp.cumsum's lowering), for one device of
each generation, and prints one JSON line per top-level op of the compiled entry: the case, the
generation, its name, result shape with layout and memory space, opcode, estimated_cycles, and
its window_config (kernel_window_bounds, output_window_bounds, input_window_bounds,
iteration_bounds) and emitter. The window bounds show the compiler's blocks along the scan and
their halo (docs/compiler.md, scan gap (5)). Example:
    python3 bench/fidelity/probes/scan_window.py '[[[158,129,33],2],[[80,128,128],0,"f32","add"]]' v4,v5p
"""
import json, os, re, sys, time
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax
from jax.experimental import topologies
from jax._src.lib import hlo as xhlo, xla_client as xc
from jax._src.interpreters import mlir
from jax._src import compiler
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
devs = {}
def dev(g):
    if g not in devs:
        devs[g] = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[g]).devices[0]
    return devs[g]
def compile_text(txt, g):
    mod = xhlo.hlo_module_from_text(txt)
    shlo = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
    with mlir.make_ir_context():
        from jax._src.lib.mlir import ir
        module = ir.Module.parse(shlo)
        opts = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        d = dev(g)
        exe = d.client.compile(module, executable_devices=xc.DeviceList((d,)), compile_options=opts)
    return exe.hlo_modules()[0].to_string()
def scan_hlo(shape, axis, dt="s32", op="minimum", rev=False):
    n = shape[axis]
    s = ",".join(map(str, shape)); r = len(shape)
    size = "x".join(str(n if i == axis else 1) for i in range(r))
    pad = "x".join((("0_%d" % (n-1)) if rev else ("%d_0" % (n-1))) if i == axis else "0_0" for i in range(r))
    lay = ",".join(str(i) for i in reversed(range(r)))
    init = {"minimum": "2147483647" if dt == "s32" else "inf", "add": "0", "maximum": "-2147483648" if dt=="s32" else "-inf"}[op]
    return f"""HloModule p, entry_computation_layout={{({dt}[{s}]{{{lay}}})->{dt}[{s}]{{{lay}}}}}
r {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT c = {dt}[] {op}(a, b)
}}
ENTRY e {{
  x = {dt}[{s}]{{{lay}}} parameter(0)
  i = {dt}[] constant({init})
  ROOT w = {dt}[{s}]{{{lay}}} reduce-window(x, i), window={{size={size} pad={pad}}}, to_apply=r
}}
"""
def ops(text):
    entry = text[text.rfind("\nENTRY"):]
    out = []
    for line in entry.split("\n"):
        m = re.search(r'%(\S+) = (\S+) (\w[\w-]*)\(', line)
        if not m: continue
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        wc = re.search(r'"output_window_bounds":\[([^\]]*)\],"input_window_bounds":\[([^\]]*)\]', line)
        kw = re.search(r'"kernel_window_bounds":\[([^\]]*)\]', line)
        it = re.search(r'"iteration_bounds":\[([^\]]*)\]', line)
        em = re.search(r'"emitter":"(\w+)"', line)
        out.append((m.group(1), m.group(2), m.group(3), int(cyc.group(1)) if cyc else None,
                    kw.group(1).replace('"','') if kw else "", wc.group(1).replace('"','') if wc else "",
                    wc.group(2).replace('"','') if wc else "", it.group(1).replace('"','') if it else "", em.group(1) if em else ""))
    return out
if __name__ == "__main__":
    cases = json.loads(sys.argv[1]); gens = sys.argv[2].split(",")
    for c in cases:
        txt = scan_hlo(c[0], c[1], *c[2:])
        for g in gens:
            t0 = time.time()
            try:
                o = ops(compile_text(txt, g))
            except Exception as e:
                print(c, g, "ERR", str(e)[:200]); continue
            for x in o:
                if x[2] in ("parameter", "constant", "bitcast"): continue
                print(json.dumps([c, g] + list(x)), flush=True)
