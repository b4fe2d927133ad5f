#!/usr/bin/env python3
"""dup_output.py 'CASES_JSON' GENS: how the XLA TPU compiler returns one value in several
output leaves (needs libtpu). CASES_JSON is a list of [dtype, shape, leaves]: leaves is a
string of the values the root tuple returns, in order, "m" for the product a*b and "s" for
the difference a-b (e.g. "mm", "msm"). Compiles each for one device of each generation and
prints one JSON line per top-level op of the compiled entry: the case, the generation, its
name, result shape with layout and memory space, opcode and estimated_cycles (null: no
kernel estimate). Copy insertion gives a repeated leaf a `copy` of its own
(param_copy.c copy_repeated; its cost by chip: copy_kind.c tpu__dup_output_copy). Example:
    python3 bench/fidelity/probes/dup_output.py '[["f32",[64,512],"mm"],["bf16",[256,1024],"msm"]]' v4,v5e,v5p,v6e
"""
import importlib.util, json, os, re, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
# this folder's libtpu.py would shadow the libtpu package jax loads: leave it off the path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
_spec = importlib.util.spec_from_file_location("scan_window", os.path.join(HERE, "scan_window.py"))
_sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sw)
compile_text = _sw.compile_text

def dup_hlo(dt, shape, leaves):
    t = "%s[%s]{%s}" % (dt, ",".join(map(str, shape)), ",".join(str(i) for i in reversed(range(len(shape)))))
    outs = ", ".join([t] * len(leaves))
    return ("HloModule dup, entry_computation_layout={(%s, %s)->(%s)}\n\nENTRY main {\n"
            "  a = %s parameter(0)\n  b = %s parameter(1)\n  m = %s multiply(a, b)\n  s = %s subtract(a, b)\n"
            "  ROOT t = (%s) tuple(%s)\n}\n" % (t, t, outs, t, t, t, t, outs, ", ".join(leaves)))

def ops(text):
    entry = text[text.rfind("\nENTRY"):]
    out = []
    for line in entry.split("\n"):
        m = re.search(r'%(\S+) = (\(.*?\)|\S+) (\w[\w-]*)\(', line)
        if not m: continue
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        out.append((m.group(1), m.group(2), m.group(3), int(cyc.group(1)) if cyc else None))
    return out

if __name__ == "__main__":
    cases = json.loads(sys.argv[1]); gens = sys.argv[2].split(",")
    for c in cases:
        txt = dup_hlo(*c)
        for g in gens:
            try:
                o = ops(compile_text(txt, g))
            except Exception as e:
                print(json.dumps([c, g, "ERR", str(e)[:200]]), flush=True); continue
            for x in o:
                if x[2] in ("parameter", "constant", "bitcast"): continue
                print(json.dumps([c, g] + list(x)), flush=True)
