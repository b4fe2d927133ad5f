#!/usr/bin/env python3
"""probe.py CASES.py [CHIPS]: the compiler's figures for probe programs (needs libtpu:
pip install "jax[tpu]==0.10.2"). CASES.py defines CASES = [(name, f, [((shape), dtype), ...])].
For each case writes data/NAME.hlo (JAX's HLO) and data/NAME.json (the XLA TPU compiler's
top-level ops with estimated_cycles per generation, their sum, ops it leaves unestimated) and
prints them beside tpusim's time (in the compiler's cycles). Re-time the committed probes
without libtpu: python3 bench/fidelity/probes/check.py [NAME_GLOB...]."""
import json, os, re, sys, subprocess, importlib.util
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gen, jax
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
chips = sys.argv[2].split(",") if len(sys.argv) > 2 else ["v4", "v5e", "v5p", "v6e"]
TPUSIM = os.environ.get("TPUSIM", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "build", "tpusim"))
CLK = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}
for name, f, args in m.CASES:
    leaf = lambda a: isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple)
    plain = jax.tree_util.tree_map(lambda sd: gen.sds(*sd), args, is_leaf=leaf)
    hlo = jax.jit(f).lower(*plain).as_text(dialect="hlo", debug_info=True)
    open(f"{OUT}/{name}.hlo", "w").write(hlo)
    rec = {}
    for chip in chips:
        dev = gen.device(chip)
        sp = jax.tree_util.tree_map(lambda sd: gen.sds(sd[0], sd[1], dev), args, is_leaf=leaf)
        c = jax.jit(f).lower(*sp).compile()
        txt = c.as_text()
        pass  # the compiled program is not kept
        ops = gen.entry_ops(txt)
        rec[chip] = {"ops": ops, "sum": sum(o[4] for o in ops), "unest": gen.unestimated_ops(txt)}
        r = subprocess.run([TPUSIM, "run", f"{OUT}/{name}.hlo", "--mode", "timing", "--chip", {"v4": "v4:core"}.get(chip, chip), "--report", "/tmp/probe_r.json", "--quiet"], capture_output=True, text=True)
        t = None
        if r.returncode == 0:
            rep = json.load(open("/tmp/probe_r.json"))
            t = round(rep["step"]["seconds"] * CLK[chip])
        else:
            t = r.stderr.strip()[:200]
        rec[chip]["tpusim"] = t
        print(f"{name:40s} {chip:4s} compiler {rec[chip]['sum']:>10} tpusim {t}   ops: " + "; ".join(f"{o[1]}/{o[2]} {o[4]}" for o in ops)[:300] + (f" UNEST {rec[chip]['unest']}" if rec[chip]['unest'] else ""))
    json.dump(rec, open(f"{OUT}/{name}.json", "w"))
