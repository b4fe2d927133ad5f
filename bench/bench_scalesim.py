#!/usr/bin/env python3
"""Times tpusim against SCALE-Sim on the same layers, in the same run.

For each benchmark run (a config and topology from tests/scalesim/) it runs SCALE-Sim
in this process (its import time excluded) and `tpusim systolic --scalesim-compat` as a
subprocess (process start, file parsing and report writing included), once with the
closed form and once with --pe-level (the cycle-by-cycle array, which also computes and
checks the values). It checks that the Total Cycles agree, then prints the times and the
two speed ratios, per run and over all runs, and the PE level's ratio on its slowest run
(the target is 10x on every run). Last, the whole set in one process: every run in one
`tpusim systolic --batch LIST` (one process start for the set; median of the repetitions)
against SCALE-Sim's total for the same runs (the target is 10,000x).

    python3 bench/bench_scalesim.py [--tpusim build/tpusim] [--runs ID ... | --runs all] [--reps N]

Needs `pip install scalesim 'numpy<2'` (see tests/scalesim/README.md).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIX = os.path.join(ROOT, "tests", "scalesim")
DEFAULT_RUNS = ["alexnet_part_32x32", "gemm_mnk_32x32", "conv_edge_8x8",
                "alexnet_part_128x128", "alexnet_rest_128x128"]


def read_runs():
    runs = {}
    with open(os.path.join(FIX, "runs.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                rid, cfg, topo, kind = line.split()
                runs[rid] = (os.path.join(FIX, cfg), os.path.join(FIX, topo), kind)
    return runs


def column(path, name):
    with open(path) as f:
        rows = [[x.strip() for x in line.split(",")] for line in f if line.strip()]
    i = rows[0].index(name)
    return [r[i] for r in rows[1:]]


def report_path(outdir):
    (sub,) = os.listdir(outdir)
    return os.path.join(outdir, sub, "COMPUTE_REPORT.csv")


def time_scalesim(cfg, topo, kind, tmp):
    from scalesim.scale_sim import scalesim
    layout = os.path.join(tmp, "layout.csv")  # v3 opens a layout file even when unused
    with open(layout, "w") as f:
        f.write("Layer name,\n")
    out = os.path.join(tmp, "scalesim")
    t0 = time.perf_counter()
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo,
                 layout=layout, input_type_gemm=(kind == "gemm"))
    s.run_scale(top_path=out)
    return time.perf_counter() - t0, report_path(out)


def time_tpusim(binary, cfg, topo, kind, tmp, extra, reps):
    times = []
    for r in range(reps):
        out = os.path.join(tmp, f"tpusim{'_pe' if extra else ''}{r}")
        cmd = [binary, "systolic", "-q", "-c", cfg, "-t", topo, "-i", kind, "-p", out,
               "--scalesim-compat"] + ([extra] if extra else [])
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), report_path(out)


def time_batch(binary, runs, rids, tmp, reps):
    """One `tpusim systolic --batch` process for all the runs: the median wall time, and each
    run's report."""
    lst = os.path.join(tmp, "runs.txt")
    with open(lst, "w") as f:
        for rid in rids:
            cfg, topo, kind = runs[rid]
            f.write(f"{rid} {cfg} {topo} {kind}\n")
    times = []
    for r in range(reps):
        out = os.path.join(tmp, f"batch{r}")
        t0 = time.perf_counter()
        subprocess.run([binary, "systolic", "-q", "--batch", lst, "-p", out, "--scalesim-compat"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), {rid: report_path(os.path.join(out, rid)) for rid in rids}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--runs", nargs="*", default=DEFAULT_RUNS)
    ap.add_argument("--reps", type=int, default=21, help="closed-form repetitions (median)")
    args = ap.parse_args()
    import importlib.metadata as md
    runs = read_runs()
    if args.runs == ["all"]:
        args.runs = list(runs)
    print(f"SCALE-Sim {md.version('scalesim')} (Python {sys.version.split()[0]}) vs "
          f"{args.tpusim}")
    hdr = (f"{'run':24} {'layers':>6} {'cycles':>9} {'SCALE-Sim s':>11} {'closed ms':>10} "
           f"{'PE-level s':>10} {'closed x':>10} {'PE x':>7}")
    print(hdr)
    tot_ss = tot_cf = tot_pe = 0.0
    pe_ratios = []
    ok = True
    ss_cycles = {}
    for rid in args.runs:
        cfg, topo, kind = runs[rid]
        with tempfile.TemporaryDirectory() as tmp:
            t_ss, rep_ss = time_scalesim(cfg, topo, kind, tmp)
            t_cf, rep_cf = time_tpusim(args.tpusim, cfg, topo, kind, tmp, None, args.reps)
            t_pe, rep_pe = time_tpusim(args.tpusim, cfg, topo, kind, tmp, "--pe-level", 1)
            cyc = column(rep_ss, "Total Cycles")
            ss_cycles[rid] = cyc
            same = cyc == column(rep_cf, "Total Cycles") == column(rep_pe, "Total Cycles")
        ok &= same
        tot_ss += t_ss
        tot_cf += t_cf
        tot_pe += t_pe
        pe_ratios.append((t_ss / t_pe, rid))
        print(f"{rid:24} {len(cyc):>6} {sum(int(c) for c in cyc):>9} {t_ss:>11.2f} "
              f"{t_cf * 1e3:>10.2f} {t_pe:>10.3f} {t_ss / t_cf:>10.0f} {t_ss / t_pe:>7.1f}"
              f"{'' if same else '  CYCLES DIFFER'}", flush=True)
    print(f"{'all':24} {'':>6} {'':>9} {tot_ss:>11.2f} {tot_cf * 1e3:>10.2f} {tot_pe:>10.3f} "
          f"{tot_ss / tot_cf:>10.0f} {tot_ss / tot_pe:>7.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        t_b, reps_b = time_batch(args.tpusim, runs, args.runs, tmp, args.reps)
        same_b = all(column(reps_b[rid], "Total Cycles") == ss_cycles[rid] for rid in args.runs)
    ok &= same_b
    nlayers = sum(len(c) for c in ss_cycles.values())
    print(f"one process (--batch): {len(args.runs)} runs, {nlayers} layers in {t_b * 1e3:.2f} ms (process start "
          f"included), {tot_ss / t_b:.0f}x faster than SCALE-Sim's {tot_ss:.2f} s (target 10000x); Total Cycles "
          f"{'identical' if same_b else 'DIFFER'}")
    worst, worst_id = min(pe_ratios)
    print(f"closed form: {tot_ss / tot_cf:.0f}x faster than SCALE-Sim (target 10000x); "
          f"PE level: {tot_ss / tot_pe:.1f}x over all, {worst:.1f}x on the slowest run "
          f"({worst_id}; target 10x on every run); Total Cycles "
          f"{'identical' if ok else 'DIFFER'} on every layer")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
