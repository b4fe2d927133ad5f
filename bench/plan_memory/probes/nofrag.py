#!/usr/bin/env python3
"""nofrag.py (session 27): memory_analysis() temp from a libtpu buffer-assignment dump, as the
XLA heap simulator's heap plus its fragmentation: temp = heap + (heap - N), N the
no-fragmentation count (heap_simulator.cc NoFragmentationStatsHeap): the most bytes the HBM
heap's values (`preallocated-temp`, color 0) take at once, each over its own HloLiveRange,
a value freed before a value defined at the same step takes its offset (an operand whose
buffer its user shares), and -- the finding -- a while loop's phi values left out.

    python3 bench/plan_memory/probes/nofrag.py RESULTS.jsonl... -- DUMPDIR...

RESULTS: mb_excess.py's JSON lines (or its .json files) giving each program's temp by name;
DUMPDIR: the dumps mb_excess.py keeps (/tmp/mb_excess_dumps/NAME). Prints, per program, the
compiler's temp and heap and (heap + heap - N) - temp in MiB for N with every value (`all`)
and without the phis (`nophi`)."""
import glob, json, os, re, sys


def load(d):
    ba = glob.glob(os.path.join(d, "*after_optimizations-buffer-assignment.txt"))[0]
    lr = glob.glob(os.path.join(d, "*after_optimizations-live-range.txt"))[0]
    vals, cur, heap = [], False, None
    for line in open(ba):
        m = re.match(r"allocation \d+: size (\d+), (.*)", line)
        if m:
            cur = m.group(2).strip().rstrip(":") == "preallocated-temp"
            if cur:
                heap = int(m.group(1))
            continue
        m = re.match(r"\s*value: <\d+ (\S+)( \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)", line)
        if m and cur:
            n = m.group(1) if "{" in m.group(1) else m.group(1) + "{}"
            vals.append(dict(n=n, phi=bool(m.group(2)), s=int(m.group(3)), off=int(m.group(4))))
    rng = {}
    for line in open(lr):
        m = re.match(r"\s+(\S+\{[0-9,]*\}):(\d+)-(\d+)$", line)
        if m:
            rng[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return heap, [dict(v, a=rng[v["n"]][0], b=rng[v["n"]][1]) for v in vals if v["n"] in rng]


def count(vs):
    """The no-fragmentation peak: at each step the values defined there are allocated, then
    those whose range ends there freed (an operand whose offset a value defined there takes
    is freed first: the heap simulator frees it before sharing its buffer)."""
    at = {}
    for v in vs:
        at.setdefault(v["a"], []).append((1, v))
        at.setdefault(v["b"], []).append((2, v))
    cur = best = 0
    for t in sorted(at):
        defs = [v for k, v in at[t] if k == 1]
        frees = [v for k, v in at[t] if k == 2]
        offs = {v["off"] for v in defs}
        cur -= sum(v["s"] for v in frees if v["off"] in offs)
        for v in defs:
            cur += v["s"]
            best = max(best, cur)
        cur -= sum(v["s"] for v in frees if v["off"] not in offs)
    return best


def main():
    a = sys.argv[1:]
    k = a.index("--") if "--" in a else len(a)
    temps = {}
    for f in a[:k]:
        txt = open(f).read()
        try:
            d = json.loads(txt)
            rows = d.get("programs", d.get("variants", [])) if isinstance(d, dict) else d
        except ValueError:
            rows = [json.loads(x) for x in txt.splitlines() if x.startswith("{")]
        for r in rows:
            if "temp" in r:
                temps[r["name"]] = r["temp"]
    M = 2 ** 20
    for d in a[k + 1:]:
        n = os.path.basename(d.rstrip("/"))
        if n not in temps:
            continue
        heap, vs = load(d)
        t = temps[n]
        print(f"{n:22s} temp {t / M:8.1f} heap {heap / M:8.1f}  all {(2 * heap - count(vs) - t) / M:+7.1f}  "
              f"nophi {(2 * heap - count([v for v in vs if not v['phi']]) - t) / M:+7.1f}")


if __name__ == "__main__":
    main()
