"""tpusim plan PROGRAM.hlo: rank chips, slices and meshes for a program of the user's own.

The program is JAX's lowered HLO of a sharded step (`jax.jit(step).lower(...).as_text(
dialect="hlo")` with NamedShardings over a Mesh): its shardings name mesh axes, and
tpusim's partitioner (docs/spmd.md) splits it over any sizes of those axes. For each chip,
slice size and assignment of sizes to the axes (powers of two whose product is the slice),
`tpusim run --mode timing --mesh ...` partitions and times it on the chip's default slice
shape; a mesh that does not divide the program's dimensions, or a program that does not fit a
chip's HBM, is counted and left out. Time to train and cost follow from the tokens a step
consumes (--tokens-per-step) and the tokens to train (--train-tokens)."""
import itertools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


class PlanError(Exception):
    pass


def mesh_axes(path, text, given):
    """The mesh axis names: --axes, else the module header's Shardy mesh."""
    if given:
        names = [x.strip() for x in given.split(",") if x.strip()]
        if not names or any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", x) for x in names):
            raise PlanError(f"error: --axes '{given}': expected NAME,NAME,...")
        return names
    m = re.search(r"#sdy\.mesh<\[([^\]]*)\]", text)
    if not m:
        raise PlanError(f"{path}:1:1: error: the program names no mesh (no xla.sdy.meshes in its header); "
                        "give the axis names its shardings use with --axes NAME,NAME,...")
    names = re.findall(r'\\?"([^"\\]+)\\?"\s*=', m.group(1))
    if not names:
        raise PlanError(f"{path}:1:1: error: cannot read the mesh in the module header")
    return names


def assignments(naxes, n, pinned):
    """Sizes for each axis (powers of two, or the pinned ones) whose product is n."""
    pows = []
    k = 1
    while k <= n:
        pows.append(k)
        k *= 2
    out = []
    for sizes in itertools.product(*[[pinned[i]] if pinned[i] else pows for i in range(naxes)]):
        if math.prod(sizes) == n:
            out.append(sizes)
    return out


def time_one(a, path, chip, n, names, sizes, tmp, tag):
    mesh = ",".join(f"{x}={s}" for x, s in zip(names, sizes))
    rep = os.path.join(tmp, f"r{tag}.json")
    r = subprocess.run([a.tpusim, "run", path, "--mode", "timing", "--chip", chip["name"], "--mesh", mesh, "--quiet",
                        "--report", rep], capture_output=True, text=True)
    row = {"chip": chip["name"], "chips": n, "mesh": mesh, "sizes": list(sizes)}
    try:
        if r.returncode != 0:
            err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
            mm = re.search(r"program needs (\d+) bytes of HBM", r.stderr)
            if mm:
                return dict(row, status="no-fit", why="HBM", hbm_need=int(mm.group(1)))
            if "does not divide" in err or "evenly" in err:
                return dict(row, status="invalid", why=err)
            return dict(row, status="error", why=err)
        j = json.load(open(rep))
    finally:
        if os.path.exists(rep):
            os.remove(rep)
    pod = j.get("pod", {})
    return dict(row, status="ok", step_s=j["step"]["seconds"], mfu=j["flops"]["mfu"],
                hbm_peak=pod.get("hbm_peak_bytes_per_chip"), ici_wait=pod.get("ici_wait_fraction", 0.0),
                topology=pod.get("topology", "1 chip"))


def plan_hlo(a, P):
    """a: the parsed arguments; P: tools/plan/plan.py (chips, prices, Pareto, formatting)."""
    path = a.model
    try:
        text = open(path).read()
    except OSError as e:
        raise PlanError(f"error: cannot read '{path}': {e.strerror}")
    if a.tokens_per_step is None or a.tokens_per_step <= 0:
        raise PlanError("error: planning an HLO program needs --tokens-per-step N (the tokens one step consumes)")
    if a.train_tokens is None or a.train_tokens <= 0:
        raise PlanError("error: planning an HLO program needs --train-tokens N (the tokens to train on)")
    names = mesh_axes(path, text, a.axes)
    pinned = [None] * len(names)
    for spec in (a.pin or "").split(","):
        if not spec.strip():
            continue
        k, _, v = spec.partition("=")
        if k not in names or not v.isdigit() or int(v) < 1:
            raise PlanError(f"error: --pin '{spec}': expected AXIS=SIZE with AXIS one of {', '.join(names)}")
        pinned[names.index(k)] = int(v)
    chips = [P.load_chip(a.root, c) for c in a.chips.split(",")]
    prices = P.load_prices(a.root)
    tasks = []
    for chip in chips:
        sizes = P.slice_sizes(chip, a.max_chips)
        if a.slice:
            sizes = [n for n in sizes if n == a.slice]
        for n in sizes:
            for s in assignments(len(names), n, pinned):
                tasks.append((chip, n, s))
    tmp = tempfile.mkdtemp(prefix="tpusim-plan-hlo-")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        rows = list(ex.map(lambda it: time_one(a, path, it[1][0], it[1][1], names, it[1][2], tmp, it[0]),
                           enumerate(tasks)))
    os.rmdir(tmp)
    host_s = time.perf_counter() - t0
    steps = math.ceil(a.train_tokens / a.tokens_per_step)
    keep, bad = [], []
    for r in rows:
        if r["status"] != "ok":
            bad.append(r)
            continue
        price, pstat = P.price_of(prices, r["chip"], a.pricing)
        chip = next(c for c in chips if c["name"] == r["chip"])
        r["slice"] = P.slice_name(chip, r["chips"])
        r["price_per_chip_hour"], r["price_status"] = price, pstat
        r["tokens_per_s"] = a.tokens_per_step / r["step_s"]
        r["steps"] = steps
        r["wall_s"] = steps * r["step_s"]
        r["cost"] = None if price is None else price * r["chips"] * r["wall_s"] / 3600
        r["usd_per_mtok"] = None if price is None else price * r["chips"] / 3600 / r["tokens_per_s"] * 1e6
        if a.deadline and r["wall_s"] > a.deadline * 86400:
            r["status"] = "over-deadline"
            bad.append(r)
        elif a.budget and r["cost"] is not None and r["cost"] > a.budget:
            r["status"] = "over-budget"
            bad.append(r)
        else:
            keep.append(r)
    keep.sort(key=lambda r: (r["cost"] if r["cost"] is not None else float("inf"), r["wall_s"]))
    front = P.pareto(keep)
    for r in front:
        r["pareto"] = True
    out = {"program": path, "axes": names, "tokens_per_step": a.tokens_per_step, "train_tokens": a.train_tokens,
           "steps": steps, "pricing": a.pricing, "evaluated": len(rows), "host_s": host_s, "candidates": keep,
           "left_out": bad,
           "pareto": [{"slice": r["slice"], "mesh": r["mesh"], "wall_s": r["wall_s"], "cost": r["cost"]} for r in front]}
    if a.json:
        json.dump(P.finite(out), sys.stdout, indent=1, default=lambda x: None)
        sys.stdout.write("\n")
        return 0 if keep else 1
    w = sys.stdout.write
    w(f"program {path}: mesh axes {', '.join(names)}; {a.tokens_per_step:,} tokens per step, train "
      f"{a.train_tokens:.4g} tokens ({steps:,} steps)\n")
    w(f"  {len(rows)} candidates timed by tpusim in {host_s:.1f} s; pricing {a.pricing} "
      f"(chips/prices.json, read {prices.get('date')})\n\n")
    w(f"{'#':>3} {'slice':<10} {'chips':>5} {'mesh':<24} {'HBM/chip':>9} {'step s':>9} {'MFU%':>5} {'ICI%':>5} "
      f"{'tok/s':>9} {'time':>8} {'cost':>11} {'$/Mtok':>7}\n")
    for i, r in enumerate(keep[:a.top] if a.top else keep):
        hbm = P.fmt_bytes(r["hbm_peak"]) if r["hbm_peak"] is not None else "-"
        w(f"{i + 1:>3} {r['slice']:<10} {r['chips']:>5} {r['mesh']:<24} {hbm:>9} {r['step_s']:>9.4g} "
          f"{100 * r['mfu']:>5.1f} {100 * r['ici_wait']:>5.1f} {r['tokens_per_s']:>9.3g} {P.fmt_days(r['wall_s']):>8} "
          f"{P.fmt_usd(r['cost']):>11} {(r['usd_per_mtok'] if r['usd_per_mtok'] is not None else float('nan')):>7.3g}"
          + ("  *" if r.get("pareto") else "") + "\n")
    if a.top and len(keep) > a.top:
        w(f"  ... {len(keep) - a.top} more (--top 0 lists all)\n")
    if not keep:
        w("  (no candidate fits)\n")
    counts = {}
    for r in bad:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    w("\n" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ("\n" if counts else ""))
    for r in [r for r in bad if r["status"] == "error"][:5]:
        w(f"  tpusim failed on {r['chip']} {r['chips']} chips mesh {r['mesh']}: {r['why']}\n")
    return 0 if keep else 1
