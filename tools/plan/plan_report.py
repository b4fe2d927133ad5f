"""The planner's output (moved out of plan.py): bytes, days and dollars for people, JSON
without infinities, a mesh as "dxfxt pP", and the text report of a plan's candidates, the
meshes that do not fit, and the Pareto front."""
import math
import sys

import gen


def stages(r):
    """A candidate's pipeline stages over all its slices."""
    return r.get("pipeline", 1) * (r["slices"] if r.get("dcn") == "pipeline" else 1)


def fmt_bytes(b):
    for u, s in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if b >= u:
            return f"{b / u:.3g} {s}"
    return f"{b:.0f} B"


def fmt_days(s):
    if s == float("inf"):
        return "never"
    d = s / 86400
    return f"{d:.3g} d" if d >= 1 else f"{s / 3600:.3g} h"


def fmt_usd(x):
    if x is None:
        return "n/a"
    if x == float("inf"):
        return "inf"
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def finite(x):
    """JSON has no infinity: a run that never finishes (failures faster than checkpoints) is null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def mesh_s(r, mark=False):
    """data x fsdp x tensor, with the pipeline stages as "pP" after it."""
    return f"{r['data']}x{r['fsdp']}x{r['tensor']}" + (f" p{stages(r)}" if stages(r) > 1 else "") + \
        (f"x{r['repeats']}" if r.get("repeats", 1) > 1 else "") + \
        (" w" if mark and r.get("windowed") else "")


def text_report(a, out, keep, over, bad, front):
    m = a.model
    w = sys.stdout.write
    w(f"model {m['name']}: {out['params'] / 1e9:.3g}B parameters, {m['layers']} layers, d_model {m['d_model']}, "
      f"{m['heads']}x{m['head_dim']} heads, mlp {m['mlp']} ({m['mlp_kind']}), vocab {m['vocab']}, seq {m['seq']}"
      + (f", MoE {m['experts']} experts top-{m['top_k']}" if m["experts"] else "") + "\n")
    w(f"  batch {m['batch_tokens']:,} tokens, train {m['train_tokens']:.4g} tokens "
      f"({math.ceil(m['train_tokens'] / m['batch_tokens']):,} steps), {m['dtype']}, {m['optimizer']}; "
      f"{out['model_flops_per_token'] / 1e9:.4g} GFLOP per token\n")
    w(f"  {out['evaluated']} candidates, {out['timed']} programs timed by tpusim in {out['host_s']:.1f} s; pricing {a.pricing} "
      f"(chips/prices.json, read {out['price_table']['date']})\n")
    if a.failure_rate:
        w(f"  goodput: {a.failure_rate:g} failures per chip-hour, checkpoints to storage at {a.storage_bw:g} GB/s per chip, "
          f"{a.restart_min:g} min per restart, checkpoint every "
          f"{a.checkpoint_every if a.checkpoint_every else 'optimal (Young/Daly)'} steps\n")
    w("\n")
    hdr = (f"{'#':>3} {'slice':<10} {'chips':>5} {'mesh dxfxt':<11} {'mb':>3} {'remat':<5} {'HBM/chip':>9} "
           f"{'step s':>8} {'MFU%':>5} {'ICI%':>5} {'tok/s':>9} {'time':>8} {'cost':>11} {'$/Mtok':>7}")
    if a.failure_rate:
        hdr += f" {'ckpt every':>10} {'lost':>7}"
    w(hdr + "\n")
    for i, r in enumerate(keep[:a.top] if a.top else keep):
        line = (f"{i + 1:>3} {r['slice']:<10} {r['chips']:>5} {mesh_s(r, True):<11} {r['micro']:>3} {gen.remat_name(r['remat']):<5} "
                f"{fmt_bytes(r['hbm_peak']):>9} {r['step_s']:>8.4g} {100 * r['mfu']:>5.1f} {100 * r['ici_wait']:>5.1f} "
                f"{r['tokens_per_s']:>9.3g} {fmt_days(r['wall_s']):>8} {fmt_usd(r['cost']):>11} "
                f"{(r['usd_per_mtok'] if r['usd_per_mtok'] is not None else float('nan')):>7.3g}")
        if a.failure_rate:
            line += f" {r['every_steps']:>10} {fmt_days(r['lost_s']):>7}"
        w(line + ("  *" if r.get("pareto") else "") + "\n")
    if a.top and len(keep) > a.top:
        w(f"  ... {len(keep) - a.top} more (--top 0 lists all)\n")
    if keep and "dcn_s" in keep[0]:
        r = keep[0]
        what = ("the pipeline's activations and gradients passed between slices" if r.get("dcn") == "pipeline"
                else "the data-parallel gradient sums between slices")
        w(f"  #1 over {r['slices']} slices: its collectives take {r['dcn_s']:.4g} s per step over DCN ({what}) "
          f"beside {r['ici_s']:.4g} s on ICI (docs/pod.md)\n")
    if keep and stages(keep[0]) > 1:
        r = keep[0]
        V = r.get("repeats", 1)
        P = stages(r)
        f1 = r.get("schedule") == "1f1b"
        held = (f"; 1F1B: a stage holds at most {r['held_iterations']} microbatches' activations, "
                f"{fmt_bytes(r.get('hbm_saved_1f1b', 0))} less than the GPipe program"
                if f1 and "held_iterations" in r else "")
        if f1:
            held += ("; timed as one SPMD 1F1B loop from the GPipe program's forward and backward iterations"
                     if r.get("timed") == "1f1b-from-gpipe-loops" else "; timed as the GPipe program (no 1F1B loop found)")
        pad = 2 * (P - 1) if f1 and r.get("timed") == "1f1b-from-gpipe-loops" else P - 1
        w(f"  #1 pipelines {P} stages" + (f" ({V} repeats, circular)" if V > 1 else "") +
          (" (1F1B)" if r.get("schedule") == "1f1b" else "") +
          (f" over {r['slices']} slices" if r.get("dcn") == "pipeline" else "") +
          f" over {r['micro']} microbatches: every stage computes on padding "
          f"in {pad} of {r.get('iterations', r['micro'] * V + P - 1)} iterations"
          + (f", the bubble {100 * r['bubble']:.1f} % of the pipeline loops, {r['bubble_s']:.4g} s per step"
             if "bubble" in r else "") + held + " (docs/pod.md, \"Pipelines\")\n")
    if any(r.get("windowed") for r in keep):
        w("  w: FSDP over every chip of a slice the XLA TPU compiler runs windowed einsums on: the weights pass "
          "round a ring of collective-permutes instead of all-gathers (docs/spmd.md; --no-windowed-einsum)\n")
    if not keep:
        w("  (no candidate fits)\n")
    unc = sorted({r["chip"] for r in keep if r["price_status"] != "published"})
    if unc:
        w(f"  prices for {', '.join(unc)} ({a.pricing}) are not confirmed list prices: see chips/prices.json\n")
    w("\n")
    nf = [r for r in bad if r["status"] == "no-fit"]
    inv = [r for r in bad if r["status"] == "invalid"]
    err = [r for r in bad if r["status"] == "error"]
    w(f"{len(nf)} do not fit HBM")
    if nf:
        st = sum(1 for r in nf if r["why"] == "weights+optimizer")
        ac = sum(1 for r in nf if r["why"] == "activations")
        ro = sum(1 for r in nf if r["why"] == "remat on does not fit either")
        w(f" ({st} where the weights and optimizer state alone exceed a chip's HBM, {ac} where they and the saved "
          f"activations do at the most microbatches, {len(nf) - st - ac - ro} over HBM in tpusim's buffer "
          f"assignment at every microbatch count, {ro} without remat where even remat does not fit)")
    w(f"; {len(inv)} meshes do not divide the model or batch")
    if over:
        w(f"; {sum(1 for _, x in over if x == 'deadline')} over the deadline, {sum(1 for _, x in over if x == 'budget')} over the budget")
    w("\n")
    for r in err[:5]:
        w(f"  tpusim failed on {r['slice']} {mesh_s(r)} mb {r['micro']}: {r['why']}\n")
    if front:
        w("\nPareto front (cost against time to train; * above):\n")
        for r in front:
            w(f"  {r['slice']:<10} {mesh_s(r):<11} mb {r['micro']:<3} remat {gen.remat_name(r['remat']):<3} "
              f"{fmt_days(r['wall_s']):>8}  {fmt_usd(r['cost'])}\n")
    if a.svg:
        w(f"plot: {a.svg}\n")
