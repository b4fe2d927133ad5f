#!/usr/bin/env python3
"""The CLI's disk cache: `tpusim run` processes cold and warm against XLA on CPU.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/cli_cache.py [--tpusim build/tpusim] [--base-tpusim OLD/tpusim] [--reps N]
                               [--only NAME ...] [--split test|tune|all] [--max-mb MB]
                               [--limit N] [--order name|hash] [--corpus DIR]

The programs are by default the families corpus (bench/fidelity/families: JAX's HLO of real model
layers and steps, as JAX lowers them), split tune/test by the corpus's own rule (sha1 of the
name; test first), those whose parameters and result take at most --max-mb (default 16)
so that their values run in seconds. Inputs are random (floats in [-1, 1), integers in
[0, 16)), the same arrays for both sides. In the same run, for each program:

  - XLA on CPU: the program compiled once in a child process (its CPU compiler aborts on
    some modules: those have no peer and no row), then run on the inputs, best of
    --xla-reps after a warm-up: the peer's warm execute;
  - `tpusim run PROG -i IN... --quiet` as a process, full values on the tpu backend
    (values with TPU numerics, compile, timing), best of --reps:
      cold: `--no-cache` (every process parses, compiles and times the program);
      warm: with a cache folder a first run filled (compile and timing read back from it);
  - the same two in `--mode timing` (no values: what the cache saves, alone).

Besides each best wall time it prints the warm run's best CPU time (user + system of the
process, from getrusage): on a loaded machine a process waits for a core far longer than
it computes, and the CPU time is what the load does not inflate.

It prints each time and the ratios warm/cold and warm/XLA, then per split the medians and
worst ratios. A warm run's printed output (less the host-time line), report and result
files are checked equal to the cold run's; the script exits non-zero if any differ. Needs
jax and numpy. Not a test: timings depend on the machine and its load.
"""
import argparse
import glob
import hashlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def split_of(name):
    """The corpus's rule (bench/fidelity/compare.py): test when the first 8 hex digits of
    sha1(name) mod 10 < 3."""
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


DTYPES = {"f32": np.float32, "f64": np.float64, "bf16": np.float32, "f16": np.float32, "s32": np.int32,
          "s64": np.int64, "u32": np.uint32, "u8": np.uint8, "s8": np.int8, "pred": np.bool_}


def entry_params(text):
    """[(dtype, dims)] of the entry computation's parameters, from its ENTRY line's
    parameter( N ) instructions; None when a type is not one this bench fills."""
    ps = {}
    entry = text[text.index("\nENTRY"):]
    for m in re.finditer(r"=\s*(\w+)\[([\d,]*)\](?:\{[^}]*\})?\s+parameter\((\d+)\)", entry.split("\n}\n")[0]):
        if m.group(1) not in DTYPES:
            return None
        ps[int(m.group(3))] = (m.group(1), [int(x) for x in m.group(2).split(",") if x])
    return [ps[i] for i in range(len(ps))]


def make_inputs(params, rng, d):
    files = []
    for i, (dt, dims) in enumerate(params):
        if dt in ("f32", "f64", "bf16", "f16"):
            a = rng.uniform(-1, 1, dims).astype(DTYPES[dt])
        elif dt == "pred":
            a = rng.integers(0, 2, dims).astype(np.bool_)
        else:
            a = rng.integers(0, 16, dims).astype(DTYPES[dt])
        f = os.path.join(d, f"in{i}.npy")
        np.save(f, a)
        files.append(f)
    return files


def xla_exe(path, ins):
    """(run, args): XLA CPU's compiled executable of the HLO text and its device inputs."""
    import jax
    from jax._src.lib import hlo as xhlo, xla_client as xc
    mod = xhlo.hlo_module_from_text(open(path).read())
    proto = mod.as_serialized_hlo_module_proto()
    params = xhlo.XlaComputation(proto).program_shape().parameter_shapes()
    shlo = xc._xla.mlir.hlo_to_stablehlo(proto)
    dev = jax.devices("cpu")[0]
    exe = dev.client.compile_and_load(shlo, xc.DeviceList((dev,)), xc.CompileOptions())
    args = [jax.device_put(np.load(f).astype(p.element_type()), dev) for f, p in zip(ins, params)]

    def run():
        out = exe.execute(args)
        jax.block_until_ready(out)
    return run


def best(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def best_cpu(fn, reps):
    """(best wall, best CPU) seconds of fn() after a warm-up; CPU is the user + system time
    of the child processes it waited for (what the machine's load does not inflate much)."""
    fn()
    walls, cpus = [], []
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return min(walls), min(cpus)


def proc(cmd, env):
    r = subprocess.run(cmd, capture_output=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode()[-400:]}")
    return r


def nohost(out):
    return b"\n".join(l for l in out.split(b"\n") if not (l.startswith(b"backend tpu:") and l.endswith(b"host time")))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--xla-one":  # child: XLA's best time of one program
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        print(best(xla_exe(sys.argv[3], sys.argv[4:]), int(sys.argv[2])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--base-tpusim", help="another build's tpusim: its warm runs timed alongside (a before/after "
                    "against the same XLA figure)")
    ap.add_argument("--reps", type=int, default=5, help="tpusim processes per program and mode (best taken)")
    ap.add_argument("--xla-reps", type=int, default=20)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--split", default="all", choices=["test", "tune", "all"])
    ap.add_argument("--max-mb", type=float, default=16, help="largest parameters + result, MB")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "bench", "fidelity", "families"),
                    help="a folder of NAME.hlo (default the families corpus; bench/fidelity/corpus is the other), "
                         "or of case folders NAME/prog.hlo with their inputs NAME/inI.npy (tests/programs/cases: "
                         "the real programs bench/programs_speed.py times in-process)")
    ap.add_argument("--limit", type=int, default=0, help="at most N programs per split (0: all)")
    ap.add_argument("--order", default="name", choices=["name", "hash"],
                    help="order within a split: by name, or by sha1 of the name (with --limit: a sample "
                         "across the corpus's families)")
    a = ap.parse_args()
    cases = sorted(glob.glob(os.path.join(a.corpus, "*.hlo")))
    names = [os.path.basename(c)[:-4] for c in cases]
    if not cases:  # a folder of cases (tests/programs/cases): NAME/prog.hlo and its inputs NAME/inI.npy
        cases = sorted(glob.glob(os.path.join(a.corpus, "*", "prog.hlo")))
        names = [os.path.basename(os.path.dirname(c)) for c in cases]
    todo = [(split_of(n), n, c) for n, c in zip(names, cases) if not a.only or n in a.only]
    todo = [t for t in todo if a.split == "all" or t[0] == a.split]
    todo.sort(key=lambda t: (t[0] != "test", t[1] if a.order == "name" else hashlib.sha1(t[1].encode()).hexdigest()))
    if a.limit:
        todo = [t for k, t in enumerate(todo) if sum(1 for u in todo[:k] if u[0] == t[0]) < a.limit]
    tmp = tempfile.mkdtemp(prefix="tpusim-cli-cache-")
    rng = np.random.default_rng(0)
    env = dict(os.environ)
    env.pop("TPUSIM_CACHE", None)
    env.pop("TPUSIM_CACHE_LOG", None)
    cache = os.path.join(tmp, "cache")
    print(f"tpusim {a.tpusim}; load average {os.getloadavg()[0]:.2f}; best of {a.reps} processes, XLA best of {a.xla_reps}")
    # the process floor: a tpusim process that starts, prints its version and exits
    _, floor_cpu = best_cpu(lambda: proc([a.tpusim, "--version"], env), max(a.reps, 10))
    print(f"process floor (tpusim --version): best CPU {floor_cpu * 1e3:.2f} ms")
    hdr = (f"{'split':<5} {'program':<32} {'XLA ms':>8} {'cold ms':>8} {'warm ms':>8} {'warm/cold':>9} "
           f"{'warm/XLA':>8} {'warm cpu':>8} {'cpu/XLA':>7} | {'timing cold':>11} {'warm':>6} {'w/c':>5}")
    print(hdr)
    rows, bad = [], 0
    for split, name, path in todo:
        if path.endswith("prog.hlo"):  # the case's own inputs
            ins = []
            while os.path.exists(os.path.join(os.path.dirname(path), f"in{len(ins)}.npy")):
                ins.append(os.path.join(os.path.dirname(path), f"in{len(ins)}.npy"))
        else:
            params = entry_params(open(path).read())
            if params is None:
                print(f"{split:<5} {name:<32} skipped: a parameter type this bench does not fill")
                continue
            mb = sum(np.prod(dims, dtype=np.int64) * np.dtype(DTYPES[dt]).itemsize for dt, dims in params) / 1e6
            if mb > a.max_mb:
                continue
            d = os.path.join(tmp, name + ".in")
            os.makedirs(d)
            ins = make_inputs(params, rng, d)
        # XLA in a child process: its CPU compiler aborts on some optimized modules
        r = subprocess.run([sys.executable, __file__, "--xla-one", str(a.xla_reps), path] + ins,
                           capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout.strip():
            print(f"{split:<5} {name:<32} XLA refused (exit {r.returncode}): no peer, no row")
            continue
        t_xla = float(r.stdout.split()[-1])
        base = [a.tpusim, "run", path, "--quiet"]
        full = base + [x for f in ins for x in ("-i", f)]
        timing = base + ["--mode", "timing"]
        try:
            times = {}
            for mode, cmd in (("full", full), ("timing", timing)):
                o = os.path.join(tmp, name + mode)
                if mode == "timing":  # a loop bounded by its values has no timing without them: no timing columns
                    try:
                        proc(cmd + ["--no-cache"], env)
                    except RuntimeError as e:
                        times[mode] = None
                        print(f"  {name}: --mode timing refused: {str(e).splitlines()[-1][-80:]}")
                        continue
                cold = proc(cmd + ["--no-cache", "-o" if mode == "full" else "--report",
                                   o + ".cold" if mode == "full" else o + ".cold.json"], env)
                proc(cmd + ["--cache-dir", cache], env)  # fills the cache
                warm = proc(cmd + ["--cache-dir", cache, "-o" if mode == "full" else "--report",
                                   o + ".warm" if mode == "full" else o + ".warm.json"], env)
                if nohost(cold.stdout) != nohost(warm.stdout):
                    print(f"  {name} {mode}: warm output differs from cold"); bad += 1
                if mode == "full":
                    for f in sorted(os.listdir(o + ".cold")):
                        if open(os.path.join(o + ".cold", f), "rb").read() != open(os.path.join(o + ".warm", f), "rb").read():
                            print(f"  {name}: result {f} differs warm/cold"); bad += 1
                elif open(o + ".cold.json", "rb").read() != open(o + ".warm.json", "rb").read():
                    print(f"  {name}: report differs warm/cold"); bad += 1
                tc = best(lambda: proc(cmd + ["--no-cache"], env), a.reps)
                tw, cw = best_cpu(lambda: proc(cmd + ["--cache-dir", cache], env), a.reps)
                times[mode] = (tc, tw, cw)
                if mode == "full" and a.base_tpusim:
                    bcmd = [a.base_tpusim] + cmd[1:] + ["--cache-dir", cache + ".base"]
                    proc(bcmd, env)  # fills the base build's cache
                    times["base"] = best_cpu(lambda: proc(bcmd, env), a.reps)
        except RuntimeError as e:
            print(f"{split:<5} {name:<32} tpusim refused: {str(e).splitlines()[-1][:100]}")
            continue
        (fc, fw, fcpu), (tc, tw, _) = times["full"], times["timing"] or (float("nan"),) * 3
        bw, bcpu = times.get("base", (None, None))
        rows.append((split, name, t_xla, fc, fw, tc, tw, fcpu, bw, bcpu))
        print(f"{split:<5} {name:<32} {t_xla * 1e3:>8.3f} {fc * 1e3:>8.1f} {fw * 1e3:>8.1f} {fw / fc:>9.3f} "
              f"{fw / t_xla:>8.1f} {fcpu * 1e3:>8.1f} {fcpu / t_xla:>7.1f} | {tc * 1e3:>11.1f} {tw * 1e3:>6.1f} "
              f"{tw / tc:>5.2f}" + (f" | base warm {bw * 1e3:.1f} ms, cpu {bcpu * 1e3:.1f} ms, cpu/XLA {bcpu / t_xla:.1f}"
                                    if bw is not None else ""), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for split in ("test", "tune", "all"):
        rs = [r for r in rows if split == "all" or r[0] == split]
        if not rs:
            continue
        wc = [r[4] / r[3] for r in rs]
        wx = [r[4] / r[2] for r in rs]
        cx = [r[3] / r[2] for r in rs]
        twc = [r[6] / r[5] for r in rs if r[5] == r[5]] or [float("nan")]
        px = [r[7] / r[2] for r in rs]
        print(f"{split:<5} {len(rs):>3} programs: full warm/cold median {statistics.median(wc):.3f} (worst {max(wc):.3f}); "
              f"warm/XLA median {statistics.median(wx):.1f}x (worst {max(wx):.1f}x), warm CPU/XLA median "
              f"{statistics.median(px):.1f}x (worst {max(px):.1f}x), cold/XLA median "
              f"{statistics.median(cx):.1f}x; timing-mode warm/cold median {statistics.median(twc):.3f}")
        fx = [floor_cpu / r[2] for r in rs]
        print(f"{split:<5} {len(rs):>3} programs: the process floor alone is {statistics.median(fx):.1f}x XLA at the "
              f"median; warm CPU less the floor / XLA median {statistics.median([(r[7] - floor_cpu) / r[2] for r in rs]):.1f}x")
        if a.base_tpusim:
            bx = [r[8] / r[2] for r in rs]
            bpx = [r[9] / r[2] for r in rs]
            print(f"{split:<5} {len(rs):>3} programs, base build: warm/XLA median {statistics.median(bx):.1f}x "
                  f"(worst {max(bx):.1f}x), warm CPU/XLA median {statistics.median(bpx):.1f}x (worst {max(bpx):.1f}x)")
    if bad:
        print(f"{bad} warm outputs differ from cold")
        sys.exit(1)


if __name__ == "__main__":
    main()
