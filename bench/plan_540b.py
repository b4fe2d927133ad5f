#!/usr/bin/env python3
"""plan_540b.py: how long `tpusim plan` takes for a 540B-class model over every v5p slice
(4 ... 4,096 chips, powers of two) and every data x fsdp x tensor mesh (tensor <= 16),
microbatch count and remat setting: the candidates, how many programs tpusim timed, the
wall time, and — the peer measured in the same run — the time to time the winner's program
alone, so the ratio says what the search costs over one simulation.

    python3 bench/plan_540b.py --tpusim build/tpusim [--chips v5p] [--in-process]

--in-process times the candidates through the library (tpusim plan --in-process: one process,
no re-parse per candidate) instead of a `tpusim run` process per candidate.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
import gen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--chips", default="v5p")
    ap.add_argument("--max-chips", default="4096")
    ap.add_argument("--in-process", action="store_true", help="time candidates through the library (plan --in-process)")
    a = ap.parse_args()
    model = os.path.join(HERE, "plan_models", "palm_540b.json")
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([a.tpusim, "plan", model, "--chips", a.chips, "--max-chips", a.max_chips, "--json"]
                       + (["--in-process"] if a.in_process else []),
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)  # a loaded machine stretches wall, not this
    if r.returncode not in (0, 1):
        sys.exit(f"tpusim plan failed: {r.stderr.strip()}")
    j = json.loads(r.stdout)
    best = j["candidates"][0]
    m = json.load(open(model))
    m.update(dtype="bf16", optimizer="adam", experts=0)
    st = gen.Step(m, {k: best[k] for k in ("data", "fsdp", "tensor", "micro", "remat")})
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
        f.write(st.module())
    t1 = time.perf_counter()
    subprocess.run([a.tpusim, "run", f.name, "--mode", "timing", "--chip", best["chip"], "--quiet"], check=True)
    one = time.perf_counter() - t1
    os.remove(f.name)
    print(f"tpusim plan {os.path.relpath(model, ROOT)} --chips {a.chips} --max-chips {a.max_chips}"
          f"{' --in-process' if a.in_process else ''}:")
    print(f"  {j['evaluated']} candidates ({len(j['candidates'])} fit, {len(j['not_fit'])} do not fit or do not divide), "
          f"{j['timed']} programs timed by tpusim")
    print(f"  wall time {wall:.1f} s ({'under' if wall < 60 else 'OVER'} a minute); planner's own count {j['host_s']:.1f} s; "
          f"CPU time {cpu:.1f} s (user + system)")
    print(f"  cheapest: {best['slice']} mesh {best['data']}x{best['fsdp']}x{best['tensor']} mb {best['micro']} "
          f"remat {gen.remat_name(best['remat'])}: step {best['step_s']:.2f} s, MFU {100 * best['mfu']:.1f}%, "
          f"{best['wall_s'] / 86400:.1f} days, ${best['cost']:,.0f}")
    print(f"  timing that one program alone: {one:.2f} s; the whole search is {wall / one:.0f}x that")


if __name__ == "__main__":
    main()
