#!/usr/bin/env python3
"""over_phi.py (session 28): which values the XLA heap simulator's no-fragmentation count N
leaves out, from libtpu buffer-assignment dumps. memory_analysis() temp = heap + (heap - N)
(session 27, nofrag.py); session 27's N left out the while loops' phi values and was 250 MiB
over on the microbatch steps. Here N also leaves out every value defined over a dying phi:
a value that starts where a phi at its offset ends (a loop body's result written over its
element's old value -- an accumulator's select_add_fusion, a stack's dynamic-update-slice).

    nice python3 bench/plan_memory/probes/mb_excess.py NAME_OR_FILE.hlo ... > RESULTS.jsonl
    python3 bench/plan_memory/probes/over_phi.py RESULTS.jsonl -- /tmp/mb_excess_dumps/NAME ...

Prints, per program, the compiler's temp and heap, the N that temp implies (2 heap - temp),
and N counted three ways (MiB): every value, without the phis (session 27), and also without
the values defined over a dying phi (this rule). Session 28's figures: over_phi.json.
tpusim does not apply the rule (buffer_assign.c nofrag_peak; README "Session 28": its port,
branch mem-overphi, moved no tune or held-out program and two others away)."""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nofrag  # noqa: E402


def over_phi(v, phis):
    return any(p["off"] == v["off"] and p["b"] == v["a"] for p in phis)


def counts(d):
    heap, vs = nofrag.load(d)
    phis = [v for v in vs if v["phi"]]
    nophi = [v for v in vs if not v["phi"]]
    rule = [v for v in nophi if not over_phi(v, phis)]
    return heap, nofrag.count(vs), nofrag.count(nophi), nofrag.count(rule), sorted(
        {v["n"] for v in nophi if over_phi(v, phis) and v["s"] >= 1 << 20})


def main():
    a = sys.argv[1:]
    k = a.index("--") if "--" in a else len(a)
    temps = {}
    for f in a[:k]:
        for x in open(f):
            if x.startswith("{"):
                r = json.loads(x)
                if "temp" in r:
                    temps[r["name"]] = r["temp"]
    M = 2 ** 20
    rows = []
    for d in a[k + 1:]:
        n = os.path.basename(d.rstrip("/"))
        if n not in temps:
            continue
        t = temps[n]
        heap, n_all, n_nophi, n_rule, left = counts(d)
        rows.append(dict(name=n, temp=t, heap=heap, n_implied=2 * heap - t, n_all=n_all, n_nophi=n_nophi,
                         n_over_phi=n_rule, left_out=left[:12]))
        print(f"{n:28s} temp {t / M:8.1f} heap {heap / M:8.1f} N implied {(2 * heap - t) / M:8.1f}  "
              f"all {n_all / M:8.1f} nophi {n_nophi / M:8.1f} over_phi {n_rule / M:8.1f}")
    if os.environ.get("OVER_PHI_JSON"):
        json.dump({"libtpu": "0.0.42.1 (jax 0.10.2), compile-only, v5e 2x4, 8 devices", "programs": rows},
                  open(os.environ["OVER_PHI_JSON"], "w"), indent=1)


if __name__ == "__main__":
    main()
