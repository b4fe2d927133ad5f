"""buckets.py: `tpusim plan buckets` — bucket sizes for variable-length sequences.

A TPU program has static shapes, so every sequence is padded to its bucket's length. The
padding waste of a set of buckets is 1 - (sum of lengths) / (sum of padded lengths); the
fewest buckets that keep it under a target come from an exact dynamic program over the
sorted lengths (each bucket's size is the longest length it holds, rounded up to --align).
Packing (several sequences per row of --pack-len, first fit decreasing) is the one-program
alternative."""
import argparse
import json
import sys


class Bad(Exception):
    pass


def read_lengths(path):
    """LENGTHS.txt: one length per line, or 'LENGTH COUNT'; blank lines and '#' comments."""
    try:
        lines = open(path, encoding="utf-8").read().split("\n")
    except OSError as e:
        raise Bad(f"{path}:0:0: error: cannot read: {e.strerror}")
    hist = {}
    for ln, line in enumerate(lines, 1):
        body = line.split("#", 1)[0]
        fields = body.split()
        if not fields:
            continue
        if len(fields) > 2:
            col = body.index(fields[2]) + 1
            raise Bad(f"{path}:{ln}:{col}: error: expected 'LENGTH' or 'LENGTH COUNT', found a third field")
        vals = []
        for f in fields:
            col = body.index(f) + 1
            if not f.isdigit() or int(f) < 1 or len(f) > 12:
                raise Bad(f"{path}:{ln}:{col}: error: '{f}' is not a positive whole number")
            vals.append(int(f))
        n = vals[1] if len(vals) == 2 else 1
        hist[vals[0]] = hist.get(vals[0], 0) + n
    if not hist:
        raise Bad(f"{path}:1:1: error: no lengths")
    return hist


def round_up(x, a):
    return -(-x // a) * a


def evaluate(hist, sizes):
    """Padded tokens and per-bucket counts when each length goes to the smallest bucket that holds it."""
    sizes = sorted(sizes)
    pad, per = 0, {s: [0, 0] for s in sizes}
    for ln, c in hist.items():
        s = next((s for s in sizes if s >= ln), None)
        if s is None:
            return None, None
        pad += s * c
        per[s][0] += c
        per[s][1] += ln * c
    return pad, per


def best_buckets(hist, k, align):
    """The k bucket sizes with the fewest padded tokens (exact DP over distinct aligned lengths)."""
    agg = {}
    for ln, c in hist.items():
        u = round_up(ln, align)
        agg[u] = agg.get(u, 0) + c
    us = sorted(agg)
    n = len(us)
    cum = [0]
    for u in us:
        cum.append(cum[-1] + agg[u])
    INF = float("inf")
    best = [0.0] + [INF] * n  # best[j]: the first j values covered with the buckets so far
    choice = []
    for _ in range(min(k, n)):
        nb = [INF] * (n + 1)
        ch = [0] * (n + 1)
        for j in range(1, n + 1):
            uj = us[j - 1]
            cj = cum[j]
            bj, cb = INF, 0
            for i in range(j):
                bi = best[i]
                if bi == INF:
                    continue
                v = bi + uj * (cj - cum[i])
                if v < bj:
                    bj, cb = v, i
            nb[j], ch[j] = bj, cb
        best = nb
        choice.append(ch)
    sizes, j = [], n
    for ch in reversed(choice):
        if j == 0:
            break
        sizes.append(us[j - 1])
        j = ch[j]
    return sorted(sizes)


def pack(hist, row):
    """First fit decreasing into rows of `row` tokens: the number of rows."""
    rows = []  # free space per row
    for ln in sorted(hist, reverse=True):
        for _ in range(hist[ln]):
            for i, free in enumerate(rows):
                if free >= ln:
                    rows[i] -= ln
                    break
            else:
                rows.append(row - ln)
    return len(rows)


def main(argv):
    import cmdline
    ap = cmdline.Parser(argv=argv, base=3, prog="tpusim plan buckets", description=__doc__.split("\n\n")[0])
    ap.add_argument("lengths", help="LENGTHS.txt: one sequence length per line, or 'LENGTH COUNT'")
    ap.add_argument("--max-waste", type=float, default=10.0, help="target padding waste, percent (default 10)")
    ap.add_argument("--align", type=int, default=8, help="bucket sizes are multiples of this (default 8)")
    ap.add_argument("--buckets", help="evaluate these sizes instead, e.g. 64,128,256")
    ap.add_argument("--pack-len", type=int, help="row length for packing (default: the longest bucket)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not 0 <= a.max_waste < 100:
        cmdline.arg_fail(argv, 3, "--max-waste", f"--max-waste is a percentage in [0, 100), not {a.max_waste}")
    if a.align < 1:
        cmdline.arg_fail(argv, 3, "--align", f"--align must be at least 1, not {a.align}")
    try:
        hist = read_lengths(a.lengths)
    except Bad as e:
        cmdline.fail(*str(e).split(": error: ", 1)) if ": error: " in str(e) else cmdline.fail("<command line>:0:0", str(e))
    real = sum(ln * c for ln, c in hist.items())
    count = sum(hist.values())
    longest = max(hist)
    one = round_up(longest, a.align)
    if a.buckets:
        try:
            sizes = sorted({int(x) for x in a.buckets.split(",")})
        except ValueError:
            cmdline.arg_fail(argv, 3, "--buckets", f"--buckets takes sizes like 64,128,256, not '{a.buckets}'")
        if sizes[0] < 1:
            cmdline.arg_fail(argv, 3, "--buckets", "bucket sizes must be positive")
        if sizes[-1] < longest:
            cmdline.arg_fail(argv, 3, "--buckets", f"the longest sequence ({longest}) does not fit the largest bucket "
                             f"({sizes[-1]})")
    else:
        k = 1
        while True:
            sizes = best_buckets(hist, k, a.align)
            pad, _ = evaluate(hist, sizes)
            if 100 * (1 - real / pad) <= a.max_waste or len(sizes) < k:
                break
            k += 1
    pad, per = evaluate(hist, sizes)
    waste = 1 - real / pad
    if a.buckets:
        one = max(sizes)
    pad_one = one * count
    row = a.pack_len or max(sizes)
    if row < longest:
        cmdline.arg_fail(argv, 3, "--pack-len", f"--pack-len {row} is shorter than the longest sequence ({longest})")
    rows = pack(hist, row)
    pack_waste = 1 - real / (rows * row)
    res = {"sequences": count, "tokens": real, "mean_length": real / count, "longest": longest,
           "buckets": [{"size": s, "sequences": per[s][0], "tokens": per[s][1],
                        "waste": (1 - per[s][1] / (s * per[s][0])) if per[s][0] else 0.0} for s in sizes],
           "waste": waste, "padded_tokens": pad,
           "one_bucket": {"size": one, "padded_tokens": pad_one, "waste": 1 - real / pad_one},
           "compute_saved_vs_one_bucket": 1 - pad / pad_one,
           "packing": {"row": row, "rows": rows, "waste": pack_waste},
           "target_met": a.buckets is not None or 100 * waste <= a.max_waste}
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    w = sys.stdout.write
    w(f"{count:,} sequences, {real:,} tokens, mean length {real / count:.2f}, longest {longest}\n")
    w(f"one bucket of {one}: padding waste {100 * res['one_bucket']['waste']:.1f}%\n")
    what = "given" if a.buckets else f"fewest for waste <= {a.max_waste:g}% (multiples of {a.align})"
    w(f"buckets ({what}): {', '.join(str(s) for s in sizes)} -> padding waste {100 * waste:.1f}%, "
      f"{len(sizes)} compiled program(s)\n")
    if not res["target_met"]:
        w(f"  the target of {a.max_waste:g}% cannot be met with sizes in multiples of {a.align} (one bucket per "
          f"size already); a smaller --align or packing gets closer\n")
    w(f"  {'size':>6} {'sequences':>10} {'share':>6} {'waste':>6}\n")
    for b in res["buckets"]:
        w(f"  {b['size']:>6} {b['sequences']:>10,} {100 * b['sequences'] / count:>5.1f}% {100 * b['waste']:>5.1f}%\n")
    w(f"compute saved against one bucket of {one}: {100 * res['compute_saved_vs_one_bucket']:.1f}% of the padded "
      f"tokens ({pad:,} instead of {pad_one:,}; attention, quadratic in the length, saves more)\n")
    w(f"packing instead (rows of {row}, first fit decreasing): {rows:,} rows, padding waste {100 * pack_waste:.1f}%, "
      f"one program\n")
    return 0
