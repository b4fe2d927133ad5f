#!/usr/bin/env python3
"""Real programs in-process, warm: `Module.run` against XLA's warm execute on the CPU.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/programs_speed.py [--lib build/libtpusim.so] [--base-lib OLD/libtpusim.so]
                                    [--reps N] [--xla-reps N] [--split test|tune|all]
                                    [--only NAME ...] [--backends tpu ref]

The programs are tests/programs/cases (flax, optax, equinox, keras, jax.random ... as JAX
lowers them, with their committed inputs), split tune/test by a hash of the name (sha1, as
bench/fidelity does; test split first). For each program, in the same run:

  - XLA on CPU: prog.hlo compiled once in a child process (XLA's CPU compiler aborts the
    process on some modules: those get no row), then run on the case's inputs, best of
    --xla-reps after a warm-up;
  - tpusim: `tpusim.load(text)` once, one `Module.run(inputs, backend=B)` to fill the
    library's cache of compiled programs, then the best of --reps runs (warm: values,
    with the compile and timing read from the cache).

With --base-lib (and --base-python, that build's python/ folder), the same tpusim runs with
another build (in a child process, just after this build's, so both see the same machine
load): a before/after in one run.

It prints each time, the ratio tpusim / XLA, and per split the median and worst ratio.
Needs jax and numpy. Not a test: timings depend on the machine and its load.
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = os.path.join(ROOT, "tests", "programs", "cases")


def split_of(name):
    """test when the first 8 hex digits of sha1(name) mod 10 < 3 (bench/fidelity's rule)."""
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def inputs_of(case):
    n = len([f for f in os.listdir(case) if f.startswith("in") and f.endswith(".npy")])
    return [os.path.join(case, f"in{i}.npy") for i in range(n)]


def best(fn, reps):
    fn()  # warm-up
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def xla_one(path, reps, ins):
    """Child process: XLA CPU's best warm execute of one HLO text, in seconds."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    from jax._src.lib import hlo as xhlo, xla_client as xc
    mod = xhlo.hlo_module_from_text(open(path).read())
    proto = mod.as_serialized_hlo_module_proto()
    params = xhlo.XlaComputation(proto).program_shape().parameter_shapes()
    shlo = xc._xla.mlir.hlo_to_stablehlo(proto)
    dev = jax.devices("cpu")[0]
    exe = dev.client.compile_and_load(shlo, xc.DeviceList((dev,)), xc.CompileOptions())
    args = [jax.device_put(np.load(f).astype(p.element_type()), dev) for f, p in zip(ins, params)]
    print(best(lambda: jax.block_until_ready(exe.execute(args)), reps))


def tpu_one(lib, pkg, backend, reps, path, ins):
    """Child process: tpusim's best warm Module.run with library `lib` and the Python package
    in folder `pkg`, in seconds."""
    os.environ["TPUSIM_LIBRARY"] = os.path.abspath(lib)
    sys.path.insert(0, os.path.abspath(pkg))
    import tpusim
    mod = tpusim.load(open(path).read(), name=os.path.basename(os.path.dirname(path)))
    leaves = [np.load(f) for f in ins]
    print(best(lambda: mod.run(leaves, backend=backend, progress=False), reps))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--xla-one":
        xla_one(sys.argv[3], int(sys.argv[2]), sys.argv[4:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--tpu-one":
        tpu_one(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6], sys.argv[7:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libtpusim.so"))
    ap.add_argument("--base-lib", help="another build's libtpusim.so, timed alongside")
    ap.add_argument("--base-python", default=os.path.join(ROOT, "python"),
                    help="the folder holding that build's Python package (default: this tree's python/)")
    ap.add_argument("--reps", type=int, default=20, help="warm tpusim runs per program (best taken)")
    ap.add_argument("--xla-reps", type=int, default=50, help="XLA runs per program (best taken)")
    ap.add_argument("--split", default="all", choices=["test", "tune", "all"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--backends", nargs="*", default=["tpu"])
    ap.add_argument("--json", help="write the rows to this file")
    a = ap.parse_args()

    os.environ["TPUSIM_LIBRARY"] = os.path.abspath(a.lib)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tpusim

    names = sorted(os.listdir(CASES))
    if a.only:
        names = [n for n in names if n in a.only]
    order = [n for n in names if split_of(n) == "test"] + [n for n in names if split_of(n) == "tune"]
    if a.split != "all":
        order = [n for n in order if split_of(n) == a.split]
    print(f"tpusim {tpusim.version()}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; "
          f"TPUSIM_THREADS={os.environ.get('TPUSIM_THREADS', '-')}")
    hdr = f"{'split':<5} {'program':<32} {'XLA ms':>8}" + "".join(f" {b + ' ms':>9} {b + '/XLA':>8}" for b in a.backends)
    if a.base_lib:
        hdr += "".join(f" {'base ' + b + ' ms':>12} {'base/XLA':>8}" for b in a.backends)
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for name in order:
        case = os.path.join(CASES, name)
        prog = os.path.join(case, "prog.hlo")
        ins = inputs_of(case)
        r = subprocess.run([sys.executable, __file__, "--xla-one", str(a.xla_reps), prog] + ins,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{split_of(name):<5} {name:<32} XLA failed (exit {r.returncode}): no row", flush=True)
            continue
        t_xla = float(r.stdout.strip().splitlines()[-1])
        text = open(prog).read()
        mod = tpusim.load(text, name=name)
        leaves = [np.load(f) for f in ins]
        row = {"name": name, "split": split_of(name), "xla_ms": t_xla * 1e3}
        line = f"{row['split']:<5} {name:<32} {t_xla * 1e3:>8.3f}"
        for b in a.backends:
            try:
                t = best(lambda: mod.run(leaves, backend=b, progress=False), a.reps)
            except tpusim.TpusimError as e:
                line += f" {'error':>9} {'-':>8}"
                print(f"  {name} {b}: {e}", file=sys.stderr)
                continue
            row[b + "_ms"] = t * 1e3
            row[b + "_ratio"] = t / t_xla
            line += f" {t * 1e3:>9.3f} {t / t_xla:>7.1f}x"
        for b in (a.backends if a.base_lib else []):
            r = subprocess.run([sys.executable, __file__, "--tpu-one", a.base_lib, a.base_python, b, str(a.reps), prog] + ins,
                               capture_output=True, text=True)
            if r.returncode != 0:
                line += f" {'error':>12} {'-':>8}"
                continue
            t = float(r.stdout.strip().splitlines()[-1])
            row["base_" + b + "_ms"] = t * 1e3
            row["base_" + b + "_ratio"] = t / t_xla
            line += f" {t * 1e3:>12.3f} {t / t_xla:>7.1f}x"
        rows.append(row)
        print(line, flush=True)
    print()
    for split in ("test", "tune", "all"):
        sel = [r for r in rows if split == "all" or r["split"] == split]
        for b in a.backends + (["base_" + b for b in a.backends] if a.base_lib else []):
            rs = [r[b + "_ratio"] for r in sel if b + "_ratio" in r]
            if not rs:
                continue
            worst = max(sel, key=lambda r: r.get(b + "_ratio", 0))
            print(f"{split:<5} {b}: {len(rs)} programs, median {statistics.median(rs):.2f}x XLA, "
                  f"worst {worst[b + '_ratio']:.2f}x ({worst['name']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
