"""One HLO text compiled by the XLA TPU compiler (libtpu, compile-only) through
/work/shared/tools/tpu_compile.py, for the probe scripts beside this file."""
import json, os, subprocess, sys

TOOL = "/work/shared/tools/tpu_compile.py"


def compile_hlo(text, topo, d):
    """Compiles `text` for one device of topology `topo` in folder d; returns the tool's summary
    (its last JSON line: entry_estimated_cycles, ...) and the compiled program's text, or
    (None, None) when six starts fail (libtpu is shared: another process may hold it)."""
    src, out = os.path.join(d, "p.hlo"), os.path.join(d, "p.out.hlo")
    open(src, "w").write(text)
    for _ in range(6):
        p = subprocess.run([sys.executable, TOOL, src, topo, out], capture_output=True, text=True)
        if p.stdout.strip():
            return json.loads(p.stdout.strip().splitlines()[-1]), open(out).read()
    return None, None


def tpusim_cycles(tpusim, text, chip, d):
    """tpusim's step cycles for `text` on `chip` (`tpusim run --mode timing`), or None when the
    run fails."""
    src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    p = subprocess.run([tpusim, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                       capture_output=True, text=True)
    return json.load(open(rep))["step"]["cycles"] if p.returncode == 0 else None
