#!/usr/bin/env python3
"""Compile speed: tpusim compiling and timing programs for a TPU, against XLA compiling them
for the CPU, and against another tpusim build, measured in the same run.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/compile_speed.py [--lib build/libtpusim.so] [--base-lib OLD/libtpusim.so]
                                   [--corpus DIR ...] [--split test|tune|all] [--reps N] [--no-xla]

The programs are JAX's HLO of real model layers and steps: bench/fidelity/corpus (Llama-style
layers forward and backward, MLPs, attention, optimizers) and bench/fidelity/families (48
families of layers and steps), split tune/test by the corpora's own rule (sha1 of the name;
test first). For each program, in child processes of this run:

  - tpusim: `tpusim.load(text).run(mode="timing", chip=...)` through libtpusim with its cache
    of compiled programs off (TPUSIM_CACHE_ENTRIES=0): parse, verify, the compile pipeline
    (HLO passes, SPMD partitioning, back end) and the timing model; best of --reps, after a
    warm-up;
  - with --base-lib, the same through another build's library (before/after in one run);
  - XLA: JAX's CPU client compiling the same HLO text (`compile_and_load`), best of --reps
    (--no-xla skips it; a program it refuses or aborts on has no XLA figure).

It prints per program the times and the ratios tpusim / XLA and base / tpusim (speed-up),
then per split the median and the sum over the programs both sides ran. Not a test:
timings depend on the machine and its load (the best of --reps takes the least disturbed).
"""
import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def split_of(name):
    """The corpora's rule (bench/fidelity/compare.py): test when the first 8 hex digits of
    sha1(name) mod 10 < 3."""
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def best(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def child_tpusim(lib, chip, reps, paths):
    os.environ["TPUSIM_LIBRARY"] = lib
    os.environ["TPUSIM_CACHE_ENTRIES"] = "0"
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tpusim
    for p in paths:
        text = open(p).read()
        try:
            m = tpusim.load(text, name=os.path.basename(p))
            t = best(lambda: m.run(mode="timing", chip=chip), reps)
        except Exception as e:  # refused: no figure
            t = None
        print(json.dumps([p, t]), flush=True)


def child_xla(reps, paths):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    from jax._src.lib import hlo as xhlo, xla_client as xc
    dev = jax.devices("cpu")[0]
    for p in paths:
        print(json.dumps([p, "start"]), flush=True)
        try:
            proto = xhlo.hlo_module_from_text(open(p).read()).as_serialized_hlo_module_proto()
            shlo = xc._xla.mlir.hlo_to_stablehlo(proto)
            t = best(lambda: dev.client.compile_and_load(shlo, xc.DeviceList((dev,)), xc.CompileOptions()), reps)
        except Exception:
            t = None
        print(json.dumps([p, t]), flush=True)


def gather(cmd, paths):
    """{path: seconds or None} from a child; a child that dies is restarted after the
    program it died on (which gets None)."""
    out, todo = {}, list(paths)
    while todo:
        r = subprocess.run(cmd + todo, capture_output=True, text=True)
        started = None
        for line in r.stdout.splitlines():
            try:
                p, t = json.loads(line)
            except ValueError:
                continue
            if t == "start":
                started = p
            else:
                out[p] = t
                started = None
        if started is not None:
            out[started] = None
        rest = [p for p in todo if p not in out]
        if r.returncode == 0 or len(rest) == len(todo):
            for p in rest:
                out[p] = None
            break
        todo = rest
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child-tpusim":
        return child_tpusim(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
    if len(sys.argv) > 1 and sys.argv[1] == "--child-xla":
        return child_xla(int(sys.argv[2]), sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libtpusim.so"))
    ap.add_argument("--base-lib", help="another build's libtpusim.so (before/after)")
    ap.add_argument("--corpus", nargs="*", default=[os.path.join(ROOT, "bench", "fidelity", "corpus"),
                                                    os.path.join(ROOT, "bench", "fidelity", "families")])
    ap.add_argument("--split", default="test", choices=["test", "tune", "all"])
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    paths = []
    for d in a.corpus:
        for p in sorted(glob.glob(os.path.join(d, "*.hlo"))):
            n = os.path.basename(p)[:-4]
            if (a.split == "all" or split_of(n) == a.split) and (not a.only or n in a.only):
                paths.append(p)
    paths.sort(key=lambda p: (split_of(os.path.basename(p)[:-4]) != "test", p))
    me = [sys.executable, os.path.abspath(__file__)]
    print(f"{len(paths)} programs ({a.split}); chip {a.chip}; best of {a.reps}; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    new = gather(me + ["--child-tpusim", os.path.abspath(a.lib), a.chip, str(a.reps)], paths)
    base = gather(me + ["--child-tpusim", os.path.abspath(a.base_lib), a.chip, str(a.reps)], paths) if a.base_lib else {}
    xla = {} if a.no_xla else gather(me + ["--child-xla", str(a.reps)], paths)
    print(f"{'split':<5} {'program':<48} {'tpusim ms':>9} {'base ms':>9} {'speed-up':>8} {'XLA ms':>8} {'tpusim/XLA':>10}")
    rows = []
    for p in paths:
        n = os.path.basename(p)[:-4]
        t, b, x = new.get(p), base.get(p), xla.get(p)
        if t is None:
            print(f"{split_of(n):<5} {n[:48]:<48} refused")
            continue
        rows.append((split_of(n), n, t, b, x))
        print(f"{split_of(n):<5} {n[:48]:<48} {t * 1e3:>9.2f} " + (f"{b * 1e3:>9.2f} {b / t:>8.2f}" if b else f"{'':>9} {'':>8}")
              + (f" {x * 1e3:>8.2f} {t / x:>10.2f}" if x else ""))
    for split in ("test", "tune", "all"):
        rs = [r for r in rows if split == "all" or r[0] == split]
        if not rs:
            continue
        line = f"{split}: {len(rs)} programs, tpusim {sum(r[2] for r in rs) * 1e3:.0f} ms in all"
        sb = [r for r in rs if r[3]]
        if sb:
            line += (f"; speed-up over base median {statistics.median(r[3] / r[2] for r in sb):.2f}x, "
                     f"total {sum(r[3] for r in sb) / sum(r[2] for r in sb):.2f}x ({len(sb)} programs)")
        sx = [r for r in rs if r[4]]
        if sx:
            line += (f"; tpusim/XLA median {statistics.median(r[2] / r[4] for r in sx):.3f}, "
                     f"total {sum(r[2] for r in sx) / sum(r[4] for r in sx):.3f} ({len(sx)} programs)")
        print(line)


if __name__ == "__main__":
    main()
