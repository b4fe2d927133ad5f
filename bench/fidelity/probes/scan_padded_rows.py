#!/usr/bin/env python3
"""scan_padded_rows.py 'CASES_JSON' GENS [TPUSIM]: a long scan along the lanes whose rows do not
fill their memory tiles (docs/compiler.md, scan rewrite: padded rows), the XLA TPU compiler's
kernels against tpusim's (needs libtpu). CASES_JSON is a list of [shape, axis, dtype?, op?] as
scan_window.py's. For each case and generation prints the compiler's top-level ops (name,
opcode, estimated_cycles; None where it gives none), the sum of its estimates, tpusim's kernels
(`tpusim run --mode timing`) and tpusim's sum less its kernels of the kinds the compiler leaves
unestimated (as many as it leaves out, the cheapest first: compare.py's own-mode matching), and
their ratio. Example:
    python3 bench/fidelity/probes/scan_padded_rows.py '[[[2000,20],0,"f32","minimum"]]' v5e build/tpusim
"""
import importlib.util, json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # its libtpu.py is not libtpu
_spec = importlib.util.spec_from_file_location("scan_window", os.path.join(HERE, "scan_window.py"))
scan_window = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scan_window)
compile_text, ops, scan_hlo = scan_window.compile_text, scan_window.ops, scan_window.scan_hlo

_spec = importlib.util.spec_from_file_location("probe_libtpu", os.path.join(HERE, "libtpu.py"))
probe_libtpu = importlib.util.module_from_spec(_spec)  # the probes' helpers (libtpu is also a package name)
_spec.loader.exec_module(probe_libtpu)
tpusim_ops = probe_libtpu.tpusim_ops



if __name__ == "__main__":
    cases = json.loads(sys.argv[1])
    gens = sys.argv[2].split(",")
    tpusim = sys.argv[3] if len(sys.argv) > 3 else "build/tpusim"
    for c in cases:
        txt = scan_hlo(c[0], c[1], *c[2:])
        for g in gens:
            o = ops(compile_text(txt, g))
            top = [(x[0], x[2], x[3]) for x in o if x[2] not in ("parameter", "constant", "bitcast", "tuple",
                                                                 "get-tuple-element")]
            est = sum(x[2] for x in top if x[2] is not None)
            missing = [x[1] for x in top if x[2] is None]
            t = tpusim_ops(tpusim, txt, g)
            left = sorted((x for x in t if x[1] in missing), key=lambda x: x[2])[:len(missing)]
            tp = sum(x[2] for x in t) - sum(x[2] for x in left)
            print(json.dumps({"case": c, "gen": g, "compiler": top, "compiler_sum": est, "unestimated": missing,
                              "tpusim": t, "tpusim_sum_judged": tp,
                              "ratio": round(tp / est, 3) if est else None}))
            sys.stdout.flush()
