#!/usr/bin/env python3
"""loop_speed.py: how long tpusim takes to time a while loop of 2^31 - 1 iterations (the
closed form of docs/timing.md: the loop is stepped until its timing repeats, then the
remaining periods are added at once), against the peer measured in the same run: XLA on
the CPU running the same loop (JAX's CPU client, compiled once, warm), timed on a shorter
bound and scaled to 2^31 - 1 iterations.

    python3 bench/loop_speed.py [--tpusim build/tpusim] [--chip v5e] [--xla-iters 100000]

The program is tests/programs/cases/fori_cond (a fori_loop of a tanh step on f32[8,16])
with its bound set to N. The tpusim side is one `tpusim run --mode timing` process (process
start, parsing, compiling and the report included: wall and CPU time). It also checks the
closed form against two short loops: cycles(2^31 - 1) = c(100) + (2^31 - 101) (c(101) - c(100)).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PROG = os.path.join(ROOT, "tests", "programs", "cases", "fori_cond", "prog.hlo")
BOUND = "constant.7 = s32[] constant(5)"
N = 2**31 - 1


def with_bound(text, n):
    assert BOUND in text, "fori_cond's bound is not where this benchmark expects it"
    return text.replace(BOUND, f"constant.7 = s32[] constant({n})")


def tpusim_cycles(a, text, tmp, tag):
    """(cycles, wall s, CPU s) of one `tpusim run --mode timing` process."""
    path = os.path.join(tmp, f"{tag}.hlo")
    rep = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        f.write(text)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([a.tpusim, "run", path, "--mode", "timing", "--chip", a.chip, "--quiet", "--report", rep],
                   check=True)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return json.load(open(rep))["step"]["cycles"], wall, cpu


def xla_seconds(text, iters):
    """Seconds XLA on the CPU takes to run the loop with `iters` iterations (warm: compiled
    and run once first; the best of three runs)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # XLA's CPU client only (no TPU runtime probing)
    import numpy as np
    import jax
    from jax._src.lib import hlo as xhlo, xla_client as xc

    mod = xhlo.hlo_module_from_text(with_bound(text, iters))
    proto = mod.as_serialized_hlo_module_proto()
    shlo = xc._xla.mlir.hlo_to_stablehlo(proto)
    dev = jax.devices("cpu")[0]
    exe = dev.client.compile_and_load(shlo, xc.DeviceList((dev,)), xc.CompileOptions())
    x = jax.device_put(np.zeros((8, 16), np.float32), dev)
    best = None
    for _ in range(4):
        t0 = time.perf_counter()
        out = exe.execute([x])
        for o in jax.tree_util.tree_leaves(out):
            o.block_until_ready()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best  # the first run warms (counted among the four)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--xla-iters", type=int, default=100000)
    a = ap.parse_args()
    text = open(PROG).read()
    with tempfile.TemporaryDirectory(prefix="tpusim-loop-") as tmp:
        c100, _, _ = tpusim_cycles(a, with_bound(text, 100), tmp, "n100")
        c101, _, _ = tpusim_cycles(a, with_bound(text, 101), tmp, "n101")
        cN, wall, cpu = tpusim_cycles(a, with_bound(text, N), tmp, "big")
    want = c100 + (N - 100) * (c101 - c100)
    xs = xla_seconds(text, a.xla_iters)
    xla_N = xs * N / a.xla_iters
    print(f"fori_cond with {N:,} iterations on {a.chip} (load average {os.getloadavg()[0]:.1f}):")
    print(f"  tpusim run --mode timing: {wall:.3f} s wall, {cpu:.3f} s CPU (process start included); "
          f"{'under' if wall < 1 else 'OVER'} a second")
    print(f"  step {cN:,} cycles; c(100) + (N - 100) (c(101) - c(100)) = {want:,}: "
          f"{'identical' if cN == want else 'DIFFERENT'}")
    print(f"  XLA on the CPU runs {a.xla_iters:,} iterations in {xs * 1e3:.1f} ms: {xla_N:.0f} s for {N:,}; "
          f"tpusim times the loop {xla_N / wall:,.0f}x faster than XLA runs it")
    return 0 if cN == want else 1


if __name__ == "__main__":
    sys.exit(main())
