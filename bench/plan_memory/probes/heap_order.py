#!/usr/bin/env python3
"""heap_order.py (session 31): in which order does the XLA TPU compiler pack its HBM heap?
Compiles programs of the bench/plan_memory corpus with libtpu (compile-only, the judge's child
of bench/plan_memory.py) and a buffer-assignment dump, then packs the heap's own values again,
each over its HloLiveRange, in several orders, with a best fit (each buffer into the smallest
gap free over its whole live range, else on top), and prints each heap beside the dump's
`preallocated-temp` allocation.

    flock /tmp/libtpu_probe.lock nice python3 bench/plan_memory/probes/heap_order.py NAME ...
    python3 bench/plan_memory/probes/heap_order.py --dumps DIR ...   # dumps made before

NAME is a corpus name (plan/llama7b_L4_1x4x2_mb2, spmd/mix3d_block_step). Values at one
offset and size whose live ranges meet are one buffer (a loop's state, an in-place update).
Orders: spatial and temporal (XLA's GlobalDecreasingSizeBestFitHeap: size then live range,
live range then size, descending), area (size x live range), start (live-range start
ascending, the larger first), end. Session 31's figures are in heap_order.json."""
import glob, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
MiB = 1 << 20


def buffers(dump):
    """(the dump's HBM heap size, the heap's buffers as [offset, size, start, end])."""
    lr = glob.glob(os.path.join(dump, "*after_optimizations-live-range.txt"))[0]
    ba = glob.glob(os.path.join(dump, "*after_optimizations-buffer-assignment.txt"))[0]
    rng = {}
    for line in open(lr):
        m = re.match(r"    (\S+):(\d+)-(\d+)$", line)
        if m:
            rng[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    cur, heap, vals = False, 0, []
    for line in open(ba):
        m = re.match(r"allocation \d+: size (\d+)(.*)", line)
        if m:
            cur = m.group(2).startswith(", preallocated-temp")  # HBM (color 0) only
            heap += int(m.group(1)) if cur else 0
            continue
        m = re.match(r" value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)", line) if cur else None
        if m:
            name = m.group(1) if "{" in m.group(1) else m.group(1) + "{}"
            if name in rng:
                vals.append([int(m.group(3)), int(m.group(2)), *rng[name]])
    vals.sort()
    out = []
    for off, size, s, e in vals:
        b = out[-1] if out else None
        if b and b[0] == off and b[1] == size and s <= b[3]:
            b[3] = max(b[3], e)
        else:
            out.append([off, size, s, e])
    return heap, out


def best_fit(order):
    placed, top = [], 0
    for _, size, s, e in order:
        used = sorted((o, o + z) for o, z, ps, pe in placed if ps <= e and s <= pe)
        at, best, lo = None, None, 0
        for a, c in used:
            if a - lo >= size and (best is None or a - lo < best):
                at, best = lo, a - lo
            lo = max(lo, c)
        o = lo if at is None else at
        placed.append((o, size, s, e))
        top = max(top, o + size)
    return top


def live_peak(bufs):
    ev = {}
    for _, size, s, e in bufs:
        ev[s] = ev.get(s, 0) + size
        ev[e + 1] = ev.get(e + 1, 0) - size
    cur = peak = 0
    for t in sorted(ev):
        cur += ev[t]
        peak = max(peak, cur)
    return peak


ORDERS = {
    "spatial": lambda b: (-b[1], -(b[3] - b[2])),
    "temporal": lambda b: (-(b[3] - b[2]), -b[1]),
    "area": lambda b: (-b[1] * (b[3] - b[2] + 1), b[2]),
    "start": lambda b: (b[2], -b[1]),
    "end": lambda b: (b[3], -b[1]),
}


def replay(name, dump):
    heap, bufs = buffers(dump)
    r = {"name": name, "dump_heap_mib": round(heap / MiB, 2), "live_peak_mib": round(live_peak(bufs) / MiB, 2)}
    for k, key in ORDERS.items():
        r[k + "_mib"] = round(best_fit(sorted(bufs, key=key)) / MiB, 2)
    return r


def compile_dump(name, tmp):
    import plan_memory as P
    src = open(os.path.join(ROOT, "bench", "plan_memory.py")).read()
    s = src.index("CHILD = r'''") + len("CHILD = r'''")
    child = src[s:src.index("'''", s)]
    case = next(c for c in P.corpus() if c[0] == name)
    _, _, _, kind, path, topo, n = case
    dump = os.path.join(tmp, name.replace("/", "_"))
    env = dict(os.environ, TPU_ACCELERATOR_TYPE="v5litepod-8", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
               XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=NONE")
    r = subprocess.run([sys.executable, "-c", child, kind, path, topo, str(n)], capture_output=True, text=True,
                       env=env)
    line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
    return dump, (json.loads(line[6:]) if line else None)


def main():
    a = sys.argv[1:]
    if a and a[0] == "--dumps":
        for d in a[1:]:
            print(json.dumps(replay(os.path.basename(d.rstrip("/")), d)), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in a:
            dump, j = compile_dump(name, tmp)
            if not j:
                print(json.dumps({"name": name, "error": "no judge"}), flush=True)
                continue
            r = replay(name, dump)
            r["temp_mib"] = round(j["temp"] / MiB, 2)
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
