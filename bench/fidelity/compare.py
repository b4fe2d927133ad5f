#!/usr/bin/env python3
"""compare.py: tpusim's timing against the XLA TPU compiler's own cost model, program by
program and generation by generation, on the corpus bench/fidelity/gen.py wrote (committed:
no libtpu needed here).

    python3 bench/fidelity/compare.py [--tpusim build/tpusim] [--corpus DIR] [--chips v4,v5e,v5p,v6e]
                                      [--only SUBSTR] [--json OUT.json [--compact]] [--worst N] [--jobs N]
                                      [--compiled] [--check BASELINE.json] [--no-mem] [--split test|tune]
    python3 bench/fidelity/compare.py --corpus bench/fidelity/families            # the held-out corpus
    python3 bench/fidelity/compare.py --corpus bench/fidelity/families --compiled \
        --check bench/fidelity/baseline/families.compiled.json                    # exit 1 if worse

The corpus directory holds NAME.hlo and NAME.json; the compiler's compiled programs are
DIR/compiled/NAME.GEN.hlo or .hlo.gz (for the default corpus, bench/fidelity/compiled/).
Each program is in the "test" or "tune" split: its JSON's "split", else the generators' rule
(split_of: sha1 of the name, test when the first 8 hex digits mod 10 < 3); its family is its
JSON's "family", else its "category". The split report comes first: per split (test, tune,
all), per generation the programs judged, refused (tpusim exited non-zero: a failure, listed
with its error line and counted per message class) and not judged (no compiler figure), median
and p90 |error|, and the same over the credible ones (leaving out programs whose compiler
figure omits work, as below: an unestimated op of 1 MiB or more or unestimated ops that tpusim
times at 10 % of the compiler's figure or more (with --compiled the ops of the same names, else
tpusim's ops from the same JAX operations, by op_name), an op estimated below its HBM
bytes' time, a sum below its own roofline, a cross-program prefetch); then per family. Loops: the compiler's entry sum leaves while-loop bodies
out; for a program with while loops the compiler's figure here is that sum plus, per loop, its
trip count times the estimated_cycles of its body's ops, read from the compiled program
(loop_cycles); where a trip count cannot be read the program is not judged. --check BASELINE.json exits 1 when, on the test split of any
generation, the median or p90 |error| is worse than the baseline's by more than
max(1 percentage point, 2 % of the baseline value), or fewer programs are accepted; the
baseline is an earlier --json file of the same corpus and mode (--compact leaves the per-op
rows out).

For every program and generation: `tpusim run PROG.hlo --mode timing --chip CHIP --report R`
(step cycles and seconds, per-op rows with their JAX op_name) and `tpusim compile PROG.hlo
--chip CHIP` (the program header's hbm_peak), against the compiler's figures in NAME.json:
the sum of estimated_cycles over the compiled entry computation's top-level ops, converted
to seconds at the clock in COMPILER_CLOCK (docs/fidelity.md says where each comes from), and
memory_analysis (argument + output + temp - alias bytes).

Prints per generation: n, median and 90th-percentile |error| of the program time, the signed
median, the worst programs; per category; per fusion matched by JAX op_name (with --compiled:
each op of the compiled program paired with the op of its name; see match_ops); and the HBM
footprint comparison. Error = tpusim / compiler - 1. Nothing here is tuned: it
reports."""
import argparse, concurrent.futures as cf, functools, gzip, hashlib, json, math, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The compiler's cycles are TensorCore cycles of one compile-only device. Clocks (Hz) at which
# they are read as seconds: v4 1.05 GHz, v5e 1.5 GHz (published); v5p and v6e 1.75 GHz (v5p
# published; v6e derived from the compiler's own figures: its 918 TFLOP/s roofline peak over
# the per-cycle MXU throughput its GEMM estimates need). docs/fidelity.md, "Clocks".
COMPILER_CLOCK = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}
# The tpusim preset that models the compiler's device: a v4 compile-only device is one
# TensorCore (no megacore), the others are whole chips.
PRESET = {"v4": "v4:core", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}


@functools.lru_cache(maxsize=None)
def preset(chip):
    """The preset's JSON (chips/NAME.json, or a file) and whether it is one TensorCore's
    share (':core'); None for an unknown preset file."""
    base, core = chip.split(":")[0], chip.endswith(":core")
    path = base if base.endswith(".json") else os.path.join(ROOT, "chips", base + ".json")
    return (json.load(open(path)), core) if os.path.exists(path) else None


def peak_bw(chip):
    """The preset's published HBM bandwidth per device in B/s (a ':core' preset: its
    TensorCore's share); unknown preset file: infinite."""
    p = preset(chip)
    if p is None:
        return float("inf")
    d, core = p
    return d["hbm_bw"]["value"] / (d["tensorcores"]["value"] if core else 1)


def stream_bw(chip):
    """Bytes/s a streaming DMA sustains on the preset (peak_bw x hbm_efficiency), to judge
    whether a cross-program prefetch that the compiler's sum leaves out matters (unknown
    preset file: infinite, no prefetch judged to matter)."""
    p = preset(chip)
    eff = ((p[0].get("hbm_efficiency") or {}).get("value") if p else None) or 1.0
    return peak_bw(chip) * eff


ELEM_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "bf16": 2, "f16": 2, "s16": 2,
              "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}


def hbm_array_bytes(shape_text):
    """Bytes of the arrays in an HLO shape (a tuple's leaves) that live in HBM: those whose
    layout names no other memory space (S(1) VMEM, S(3) CMEM); element bytes, no padding."""
    total = 0
    for m in re.finditer(r"(\w+)\[([\d,]*)\](\{[^}]*\})?", shape_text):
        if m.group(1) not in ELEM_BYTES or (m.group(3) and re.search(r"S\([1-9]\)", m.group(3))):
            continue
        n = 1
        for d in m.group(2).split(","):
            if d:
                n *= int(d)
        total += n * ELEM_BYTES[m.group(1)]
    return total


def in_place_operand(line, comps):
    """The operand a dynamic-update-slice or scatter updates in place, its result aliasing
    it (an op of that kind, or a fusion whose root is one updating a fused parameter): its
    index, or None."""
    m = re.search(r"= (?:\(.*?\)|\S+) ([\w-]+)\(", line)
    if not m:
        return None
    if m.group(1) in ("dynamic-update-slice", "scatter"):
        return 0
    c = re.search(r"calls=%([\w.\-]+)", line)
    if m.group(1) != "fusion" or not c:
        return None
    body = comps.get(c.group(1), [])
    root = next((l for l in body if l.lstrip().startswith("ROOT ")), "")
    r = re.search(r"= (?:\(.*?\)|\S+) (dynamic-update-slice|scatter)\(%([\w.\-]+)", root)
    if not r:
        return None
    for l in body:
        pm = re.match(r"\s*%" + re.escape(r.group(2)) + r" = \S+ parameter\((\d+)\)", l)
        if pm:
            return int(pm.group(1))
    return None


def below_bandwidth(compiled_hlo, bw, clock):
    """The entry ops of a compiled program whose estimated_cycles are below the time their
    HBM bytes (operands and results of 1 MiB or more, outside VMEM/CMEM) take at the
    published bandwidth bw: estimates no chip could meet, which leave work out. An update in
    place (a dynamic-update-slice or scatter, or a fusion rooted at one) moves only its
    update: neither its result nor the operand it aliases counts (the compiler's
    constant_dynamic-update-slice_fusion of a 64 MiB KV cache writes 1 MiB)."""
    if os.path.exists(compiled_hlo):
        text = open(compiled_hlo).read()
    elif os.path.exists(compiled_hlo + ".gz"):
        text = gzip.open(compiled_hlo + ".gz", "rt").read()
    else:
        return []
    comps = computations(text)
    entry = text[text.rfind("\nENTRY"):]
    shapes, out = {}, []
    for line in entry.split("\n"):
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ", line)
        if m:
            shapes[m.group(1)] = m.group(2)
    for line in entry.split("\n"):
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) [\w-]+\(([^)]*)\)", line)
        c = re.search(r'"estimated_cycles":"(\d+)"', line)
        if not m or not c:
            continue
        operands = [re.sub(r"/\*.*?\*/", "", o).strip().lstrip("%") for o in m.group(3).split(",")]
        upd = in_place_operand(line, comps)
        b = (hbm_array_bytes(m.group(2)) if upd is None else 0) + sum(
            hbm_array_bytes(shapes.get(o, "")) for i, o in enumerate(operands) if i != upd)
        if b >= 1 << 20 and int(c.group(1)) / clock < b / bw:
            out.append(m.group(1))
    return out


def read_compiled(path):
    """A compiled program's text (NAME.GEN.hlo or NAME.GEN.hlo.gz), or None."""
    if os.path.exists(path):
        return open(path).read()
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt").read()
    return None


def computations(text):
    """{computation name: [its instruction lines]} of an HLO module's text ('ENTRY' for the entry)."""
    comps, cur = {}, None
    for line in text.split("\n"):
        if cur is None:
            m = re.match(r"(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
            if m and not line.startswith(" "):
                cur = "ENTRY" if m.group(1) else m.group(2)
                comps[cur] = []
        elif line.startswith("}"):
            cur = None
        else:
            comps[cur].append(line)
    return comps


def loop_cycles(text):
    """The compiler's estimated cycles of the while loops of a compiled program's entry
    computation, which its entry sum leaves out: for each while, the trip count (its
    backend_config's known_trip_count, else the constant its condition compares the counter
    with, LT) times the estimated_cycles of the body's top-level ops (nested loops likewise).
    Returns (number of while loops in the entry, their cycles or None where a trip count or
    a body is not found)."""
    comps = computations(text)

    def whiles(comp):
        return [l for l in comps.get(comp, []) if re.search(r" while\(", l)]

    def body_cycles(comp, depth=0):
        total = sum(int(c) for l in comps.get(comp, []) for c in re.findall(r'"estimated_cycles":"(\d+)"', l))
        for w in whiles(comp):
            c = one_loop(w, depth + 1)
            if c is None:
                return None
            total += c
        return total

    def one_loop(w, depth):
        if depth > 8:
            return None
        b, c = re.search(r"body=%([\w.\-]+)", w), re.search(r"condition=%([\w.\-]+)", w)
        if not b or not c or b.group(1) not in comps:
            return None
        k = re.search(r'"known_trip_count":\{"n":"(\d+)"', w)
        if k:
            trips = int(k.group(1))
        else:
            cond = comps.get(c.group(1), [])
            consts = {m.group(1): int(m.group(2)) for l in cond
                      for m in [re.match(r"\s*%([\w.\-]+) = s32\[\]\S* constant\((\d+)\)", l)] if m}
            cmp = [l for l in cond if " compare(" in l and "direction=LT" in l]
            ops = re.findall(r"%([\w.\-]+)", cmp[0].split("compare(", 1)[1]) if cmp else []
            hit = [consts[o] for o in ops if o in consts]
            if len(hit) != 1:
                return None
            trips = hit[0]
        per = body_cycles(b.group(1), depth)
        return None if per is None else trips * per
    ws = whiles("ENTRY")
    if not ws:
        return 0, 0
    total = 0
    for w in ws:
        c = one_loop(w, 1)
        if c is None:
            return len(ws), None
        total += c
    return len(ws), total


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_tpusim(tpusim, hlo, chip, mem=True):
    with tempfile.TemporaryDirectory() as td:
        if hlo.endswith(".gz"):
            plain = os.path.join(td, os.path.basename(hlo)[:-3])
            with gzip.open(hlo, "rt") as fi, open(plain, "w") as fo:
                fo.write(fi.read())
            return run_tpusim(tpusim, plain, chip, mem)
        rep = os.path.join(td, "r.json")
        p = subprocess.run([tpusim, "run", hlo, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
        r = json.load(open(rep))
    out = {"cycles": r["step"]["cycles"], "seconds": r["step"]["seconds"], "clock_hz": r["step"]["clock_hz"],
           "hbm_bytes": r["hbm"]["bytes"], "flops": r["flops"]["useful"],
           "ops": [(o["name"], o.get("kind", ""), o.get("op_name", ""), o["seconds"]) for o in r["ops"]]}
    if not mem:
        out["hbm_peak"], out["xprefetch"] = None, 0
        return out
    p = subprocess.run([tpusim, "compile", hlo, "--chip", chip], capture_output=True, text=True)
    m = re.search(r"hbm_peak=(\d+)", p.stdout[:4096]) if p.returncode == 0 else None
    out["hbm_peak"] = int(m.group(1)) if m else None
    m = re.search(r"xprefetch_bytes=(\d+)", p.stdout[:4096]) if p.returncode == 0 else None
    out["xprefetch"] = int(m.group(1)) if m else 0
    return out


def op_key(op_name):
    """The JAX-level key a fusion is matched on: its metadata op_name without the jit(...)
    wrapper and transform prefixes, e.g. 'jit(f)/jvp(attention)/dot_general' -> 'dot_general'
    plus the enclosing named scopes. Both tools print the same op_name for ops that come
    from the same JAX equation."""
    if not op_name:
        return ""
    parts = [p for p in op_name.split("/") if not p.startswith("jit(")]
    return "/".join(parts)


def match_ops(comp_ops, sim_ops, clock, by_name=False):
    """Pairs the compiler's top-level ops with tpusim's by op_name key: both sides are grouped
    by key and summed (a key that several fusions share on one side is compared as a group);
    only keys present on both sides are compared. With by_name (a compiled program, whose
    ops tpusim runs under the compiler's own names), each op is paired with the op of its
    name instead, one to one. Returns [(key, compiler_s, tpusim_s)]."""
    a, b = {}, {}
    for name, opc, kind, on, cyc in comp_ops:
        k = name if by_name else op_key(on)
        if k:
            a[k] = a.get(k, 0.0) + cyc / clock
    for name, kind, on, sec in sim_ops:
        k = name if by_name else op_key(on)
        if k:
            b[k] = b.get(k, 0.0) + sec
    return [(k, a[k], b[k]) for k in a if k in b]


def unestimated_keys(comp, ctext):
    """The JAX op_name keys (op_key) of the ops of a compiled program that do work and carry
    no estimated_cycles: each unestimated op's metadata op_name, leaving out ops on the scalar
    unit (results in memory space S(6)) and keys the compiler's estimated ops carry too (work
    the compiler does count under that name), other than ops that only make values (SOURCE_OPS)."""
    return unestimated_match(comp, ctext)[0]


SOURCE_OPS = ("iota", "broadcast", "constant")


def unestimated_match(comp, ctext):
    """(keys, kinds, names): unestimated_keys' op_name keys; per opcode, how many unestimated
    ops of it do work and carry no op_name at all (the compiler's scan reduce-windows: the two
    of cummax_1024_ax0_rev_bf16 carry none), for which as many of tpusim's own ops of that
    opcode stand, its cheapest (kind_seconds: a lower bound, as tpusim's other ops of that
    opcode may be kernels the compiler estimates: cumsum_1000x1024_ax1_f32's in-block scan is
    the compiler's estimated kOutput fusion, its cross-block scan of 8 sums reduce-window.1);
    and the names of the unestimated ops either matches."""
    if not ctext:
        return set(), {}, {}
    entry = ctext[ctext.rfind("\nENTRY"):]
    # keys the compiler's estimated ops carry; an op that only makes values (an iota, a
    # broadcast) does not count: top_k_b32n8k8_bf16's estimated iota and unestimated sort both
    # carry top_k's op_name, the sort being all of its work
    estimated = {op_key(o[3]) for o in comp.get("ops", []) if len(o) > 3 and o[1] not in SOURCE_OPS}
    keys, kinds, names = set(), {}, {}
    for u in comp.get("unestimated", []):
        m = re.search(r"\n\s*(?:ROOT )?%" + re.escape(u[0]) + r" = (\(.*?\)|\S+) ([a-z-]+)\([^\n]*", entry)
        if not m or "S(6)" in m.group(1):
            continue
        on = re.search(r'op_name="([^"]*)"', m.group(0))
        k = op_key(on.group(1)) if on else ""
        if k and k not in estimated:
            keys.add(k)
            names[u[0]] = ("key", k)
        elif not on:
            kinds[m.group(2)] = kinds.get(m.group(2), 0) + 1
            names[u[0]] = ("kind", m.group(2))
    return keys, kinds, names


def unestimated_s(comp, sim, ctext=None, compiled=True):
    """tpusim's seconds on the ops of a compiled program that the compiler gave no
    estimated_cycles (gen.py unestimated): with compiled, the ops of the same names (tpusim
    runs the compiled program); else tpusim's own ops from the same JAX operations (the same
    op_name keys, unestimated_keys)."""
    if compiled:
        names = {u[0] for u in comp.get("unestimated", [])}
        return sum(sec for name, _, _, sec in sim["ops"] if name in names)
    keys, kinds, _ = unestimated_match(comp, ctext)
    return sum(sec for _, _, on, sec in sim["ops"] if keys and op_key(on) in keys) + kind_seconds(kinds, keys, sim)


def kind_seconds(kinds, keys, sim):
    """tpusim's seconds on the n cheapest of its ops of each opcode in kinds (opcode -> n),
    of those not already counted through an op_name key in keys."""
    t = 0.0
    for kind, n in kinds.items():
        t += sum(sorted(sec for _, k, on, sec in sim["ops"] if k == kind and op_key(on) not in keys)[:n])
    return t


def unestimated(comp, sim, cs, compiled, ctext=None):
    """The ops the compiler's figure leaves out, for "credible": those with a result of 1 MiB
    or more; also those tpusim times when together they take 10 % of the compiler's figure
    or more (with compiled, the ops of the same names; else the ops of tpusim's own
    compilation from the same JAX operations: sort_kv_1x1000_f32's 4,000-byte sort is all of
    its work, the compiler's figure an iota's kernel)."""
    out = [u[0] for u in comp.get("unestimated", []) if u[2] >= 1 << 20]
    if cs > 0 and unestimated_s(comp, sim, ctext, compiled) >= 0.1 * cs:
        if compiled:
            timed = {name for name, _, _, sec in sim["ops"] if sec > 0}
        else:
            _, _, matched = unestimated_match(comp, ctext)
            simkinds = {kind for _, kind, _, sec in sim["ops"] if sec > 0}
            timed = {n for n, (how, v) in matched.items() if how == "key" or v in simkinds}
        out += [u[0] for u in comp.get("unestimated", []) if u[0] in timed and u[0] not in out]
    return out


def split_of(name):
    """The split rule of the generators (gen_families.py): test when the first 8 hex digits of
    sha1(name) mod 10 < 3 (about 30 %), else tune."""
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def refusal_class(err):
    """A refusal's message without its location and with names and numbers made generic, so
    that refusals of one kind count together."""
    m = re.sub(r"^(.*?: )?error: ", "", err)
    m = re.sub(r"%[\w.\-]+", "%X", m)
    return re.sub(r"(?<![A-Za-z_\d])\d+", "N", m)


SPLITS = ("test", "tune", "all")


def stats(rs):
    ae = [abs(r["err"]) for r in rs]
    return {"n": len(rs), "median_abs_err": pct(ae, 0.5), "p90_abs_err": pct(ae, 0.9),
            "median_err": pct([r["err"] for r in rs], 0.5), "within_10pct": sum(e <= 0.10 for e in ae),
            "within_25pct": sum(e <= 0.25 for e in ae)}


def split_summary(rows, failures, split, family, chips):
    """{split: {chip: counts and figures}}, {split: {family: {chip: figures}}}, refusal classes
    {chip: {class: [count, an example program, its message]}}."""
    out, fams = {}, {}
    for sp in SPLITS:
        out[sp], fams[sp] = {}, {}
        insp = lambda n: sp == "all" or split[n] == sp
        for c in chips:
            rs = [r for r in rows if r["chip"] == c and insp(r["name"])]
            fl = [f for f in failures if f[0] == c and insp(f[1])]
            if not rs and not fl:
                continue
            judged = [r for r in rs if r["compiler_s"] > 0]
            cred = [r for r in judged if not r["cross_program_prefetch_bytes"] and not r["below_own_roofline"]
                    and not r["unestimated"] and not r["below_bandwidth"]]
            cs_ = stats(cred)
            out[sp][c] = dict(stats(judged), programs=len(rs) + len(fl), accepted=len(rs), refused=len(fl),
                              n_credible=len(cred), median_abs_err_credible=cs_["median_abs_err"],
                              p90_abs_err_credible=cs_["p90_abs_err"],
                              not_judged=len(rs) - len(judged),
                              loops_judged=sum(1 for r in judged if r.get("while_loops")))
            for fam in sorted(set(family[r["name"]] for r in rs) | set(family[f[1]] for f in fl)):
                fj = [r for r in judged if family[r["name"]] == fam]
                fams[sp].setdefault(fam, {})[c] = dict(stats(fj), refused=sum(family[f[1]] == fam for f in fl),
                                                       not_judged=sum(family[r["name"]] == fam and r["compiler_s"] <= 0
                                                                      for r in rs))
    ref = {}
    for c, n, e in failures:
        k = refusal_class(e)
        x = ref.setdefault(c, {}).setdefault(k, [0, n, e])
        x[0] += 1
    return out, fams, ref


def print_split_report(out, fams, ref, chips, markdown):
    f1 = lambda x: "-" if x != x else f"{100 * x:.1f}%"
    for sp in SPLITS:
        if not out.get(sp):
            continue
        nprog = max(v["programs"] for v in out[sp].values())
        print(f"\n=== split {sp.upper()} ({nprog} programs): per generation")
        print(f"  {'gen':4s} {'programs':>8s} {'accepted':>8s} {'refused':>7s} {'no-figure':>9s} {'judged':>6s} "
              f"{'median|err|':>11s} {'p90|err|':>9s} {'signed med':>10s} {'<=10%':>5s} {'<=25%':>5s} {'loops':>5s} "
              f"{'credible':>8s} {'median':>7s} {'p90':>7s}")
        for c, v in out[sp].items():
            print(f"  {c:4s} {v['programs']:8d} {v['accepted']:8d} {v['refused']:7d} {v['not_judged']:9d} {v['n']:6d} "
                  f"{f1(v['median_abs_err']):>11s} {f1(v['p90_abs_err']):>9s} {f1(v['median_err']):>10s} "
                  f"{v['within_10pct']:5d} {v['within_25pct']:5d} {v['loops_judged']:5d} {v['n_credible']:8d} "
                  f"{f1(v['median_abs_err_credible']):>7s} {f1(v['p90_abs_err_credible']):>7s}")
        print(f"=== split {sp.upper()}: per family, median |err| (p90) per generation; refused programs in brackets; "
              f"worst first")
        key = lambda fam: -max((x["median_abs_err"] for x in fams[sp][fam].values() if x["n"]), default=float("inf"))
        for fam in sorted(fams[sp], key=key):
            cells = []
            for c in chips:
                x = fams[sp][fam].get(c)
                cells.append("-" if not x else f"{f1(x['median_abs_err'])} ({f1(x['p90_abs_err'])})"
                             + (f" [{x['refused']}]" if x["refused"] else ""))
            n = max(x["n"] + x["refused"] + x["not_judged"] for x in fams[sp][fam].values())
            print(f"  {fam:22s} n={n:3d}  " + "  ".join(f"{c} {cell:22s}" for c, cell in zip(chips, cells)))
        if markdown:
            print(f"\n| {sp} split | programs | refused | median abs err | p90 abs err | signed median |")
            print("|---|---|---|---|---|---|")
            for c, v in out[sp].items():
                print(f"| {c} | {v['programs']} | {v['refused']} | {f1(v['median_abs_err'])} | {f1(v['p90_abs_err'])} "
                      f"| {f1(v['median_err'])} |")
    if ref:
        print("\n=== refusals by message class (count per generation; an example)")
        classes = sorted(set(k for c in ref for k in ref[c]), key=lambda k: -sum(ref[c].get(k, [0])[0] for c in ref))
        for k in classes:
            ex = next(ref[c][k] for c in ref if k in ref[c])
            print(f"  {' '.join(f'{c}:{ref[c][k][0]}' if k in ref.get(c, {}) else f'{c}:0' for c in chips)}  {k[:160]}\n"
                  f"      e.g. {ex[1]}: {ex[2][:200]}")


def check(baseline, out, mode):
    """Test split, every generation of the baseline: median and p90 |error| no worse than the
    baseline's by more than max(1 point, 2 % of it); accepted programs no fewer."""
    b = json.load(open(baseline))
    bad = []
    if b.get("mode") and b["mode"] != mode:
        bad.append(f"baseline mode {b['mode']} != {mode}")
    for c, bv in b["splits"]["test"].items():
        v = out["test"].get(c)
        if v is None:
            bad.append(f"{c}: no test programs run")
            continue
        for k in ("median_abs_err", "p90_abs_err"):
            if bv[k] != bv[k]:
                continue
            tol = max(0.01, 0.02 * bv[k])
            ok = v[k] <= bv[k] + tol
            print(f"check {c} test {k}: {100 * v[k]:.2f}% against baseline {100 * bv[k]:.2f}% "
                  f"(tolerance {100 * tol:.2f} points): {'ok' if ok else 'WORSE'}")
            if not ok:
                bad.append(f"{c} test {k} {100 * v[k]:.2f}% > {100 * bv[k]:.2f}% + {100 * tol:.2f}")
        ok = v["accepted"] >= bv["accepted"]
        print(f"check {c} test accepted: {v['accepted']} against baseline {bv['accepted']}: {'ok' if ok else 'FEWER'}")
        if not ok:
            bad.append(f"{c} test accepted {v['accepted']} < {bv['accepted']}")
    for x in bad:
        print("check failed:", x)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "corpus"))
    ap.add_argument("--chips", default="v4,v5e,v5p,v6e")
    ap.add_argument("--only", default="", help="comma-separated name substrings")
    ap.add_argument("--json", default="")
    ap.add_argument("--worst", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="also print the per-generation table as Markdown")
    ap.add_argument("--compiled", action="store_true",
                    help="time the compiler's own compiled programs (bench/fidelity/compiled/NAME.GEN.hlo, "
                         "gen.py compiled=GEN) instead of tpusim's compilation of NAME.hlo")
    ap.add_argument("--check", default="", metavar="BASELINE.json",
                    help="exit 1 if the test split is worse than this earlier --json summary (see the header)")
    ap.add_argument("--split", default="", choices=["", "test", "tune"], help="run only this split's programs")
    ap.add_argument("--compact", action="store_true", help="--json without the per-op rows (a baseline)")
    ap.add_argument("--no-mem", action="store_true", help="skip tpusim compile's HBM footprint (half the runs)")
    ap.add_argument("--preset", action="append", default=[], metavar="GEN=CHIP",
                    help="run generation GEN on tpusim chip CHIP (default v4=v4:core, others by name)")
    a = ap.parse_args()
    chips = a.chips.split(",")
    for kv in a.preset:
        g, _, chip = kv.partition("=")
        PRESET[g] = chip
    only = [w for w in a.only.split(",") if w] or [""]
    names = sorted(f[:-5] for f in os.listdir(a.corpus) if f.endswith(".json") and f != "probes.json"
                   and os.path.exists(os.path.join(a.corpus, f[:-5] + ".hlo")) and any(w in f for w in only))
    if not names:
        sys.exit("no programs in %s" % a.corpus)
    recs = {n: json.load(open(os.path.join(a.corpus, n + ".json"))) for n in names}
    compiled_dir = os.path.join(a.corpus, "compiled")
    if not os.path.isdir(compiled_dir):
        compiled_dir = os.path.join(HERE, "compiled")

    def src(n, c):
        if not a.compiled:
            return os.path.join(a.corpus, n + ".hlo")
        f = os.path.join(compiled_dir, f"{n}.{c}.hlo")
        return f if os.path.exists(f) or not os.path.exists(f + ".gz") else f + ".gz"
    split = {n: recs[n].get("split") or split_of(n) for n in names}
    if a.split:
        names = [n for n in names if split[n] == a.split]
    family = {n: recs[n].get("family") or recs[n]["category"] for n in names}
    jobs = [(n, c) for n in names for c in chips if c in recs[n]["chips"] and os.path.exists(src(n, c))]
    with cf.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        sims = dict(zip(jobs, ex.map(lambda j: run_tpusim(a.tpusim, src(*j), PRESET.get(j[1], j[1]), not a.no_mem), jobs)))
    rows, failures = [], []
    for (n, c), s in sims.items():
        comp = recs[n]["chips"][c]
        if "error" in s:
            failures.append((c, n, s["error"]))
            continue
        # a program with while loops: the compiler's entry sum leaves their bodies out; add
        # trip count x body (loop_cycles, from its compiled program), or judge it not at all
        ctext = read_compiled(os.path.join(compiled_dir, f"{n}.{c}.hlo"))
        nloops, lcyc = loop_cycles(ctext) if ctext else (comp.get("while_loops", 0), None)
        ccycles = comp["estimated_cycles"] + (lcyc or 0)
        cs = ccycles / COMPILER_CLOCK[c] if not nloops or lcyc is not None else 0.0
        m = comp.get("memory")  # a probe's mini corpus (gen.write_probe_corpus) has none
        cmem = m["argument"] + m["output"] + m["temp"] - m["alias"] if m else None
        xpf = sum(b for _, b, x in comp.get("async_copies", []) if x)
        # the prefetch matters when moving it would take > 10 % of the compiler's program time
        xpf = xpf if xpf / stream_bw(PRESET.get(c, c)) > 0.1 * cs else 0
        # ... and tpusim did not prefetch the same parameter (its size, padded alike or not, within 25 %)
        xpf = xpf if abs(s["xprefetch"] - xpf) > 0.25 * xpf else 0
        rows.append({"chip": c, "name": n, "category": recs[n]["category"], "family": family[n], "split": split[n],
                     "kind": recs[n].get("kind", ""), "compiler_s": cs,
                     "cross_program_prefetch_bytes": xpf, "compiler_ops": len(comp["ops"]),
                     # the compiler's estimate below half of its own roofline lower bound
                     # (cost_analysis optimal_seconds, where positive): work it leaves out
                     "below_own_roofline": bool(comp.get("optimal_seconds") and comp["optimal_seconds"] > 0
                                                and cs < 0.5 * comp["optimal_seconds"]),
                     # an op that does work but carries no estimated_cycles (a scatter's kCustom
                     # fusion, a sort, a reduce-window; gen.py unestimated) with a result of 1 MiB
                     # or more: the compiler's sum leaves it out; also every unestimated op tpusim
                     # times (with --compiled under the compiler's names, else through the same
                     # JAX op_name) when together they take 10 % of the compiler's figure or more
                     # (a small reduce-window or sort whose kernel alone outweighs the rest: its
                     # time is in tpusim's figure and not in the compiler's)
                     "unestimated": unestimated(comp, s, cs, a.compiled, ctext),
                     "unestimated_s": unestimated_s(comp, s, ctext, a.compiled),
                     # an op estimated below the time its HBM bytes take at the published
                     # bandwidth (the compiled program's own memory spaces): leaves work out
                     "below_bandwidth": below_bandwidth(os.path.join(compiled_dir, f"{n}.{c}.hlo"),
                                                        peak_bw(PRESET.get(c, c)), COMPILER_CLOCK[c]),
                     "tpusim_ops": len(s["ops"]),
                     "tpusim_s": s["seconds"], "err": s["seconds"] / cs - 1 if cs > 0 else float("nan"),
                     "compiler_cycles": ccycles, "while_loops": nloops, "loop_cycles": lcyc,
                     "tpusim_cycles": s["cycles"],
                     "tpusim_clock": s["clock_hz"], "compiler_mem": cmem, "tpusim_mem": s["hbm_peak"],
                     "fusions": match_ops(comp["ops"], s["ops"], COMPILER_CLOCK[c], by_name=a.compiled)})
    print(f"tpusim against the XLA TPU compiler's cost model: {len(names)} programs, {len(rows)} runs "
          f"({len(failures)} failed); error = tpusim / compiler - 1 of the program time"
          + (" (the compiler's compiled programs)" if a.compiled else " (tpusim's own compilation)"))
    sp_out, sp_fams, sp_ref = split_summary(rows, failures, split, family, chips)
    print_split_report(sp_out, sp_fams, sp_ref, chips, a.markdown)
    print("\n=== all programs, in detail")
    summary = {}
    for c in chips:
        rs = [r for r in rows if r["chip"] == c and r["compiler_s"] > 0]
        if not rs:
            continue
        ae = [abs(r["err"]) for r in rs]
        fz = [(k, cs, ts) for r in rs for (k, cs, ts) in r["fusions"] if cs > 0]
        fe = [abs(ts / cs - 1) for k, cs, ts in fz]
        mem = [r["tpusim_mem"] / r["compiler_mem"] - 1 for r in rs if r["tpusim_mem"] and r["compiler_mem"] > 0]
        full = [r for r in rs if not r["cross_program_prefetch_bytes"] and not r["below_own_roofline"]
                and not r["unestimated"] and not r["below_bandwidth"]]
        fe_ = [abs(r["err"]) for r in full]
        # the programs whose every op of 1 MiB or more the compiler estimated: its sum is a
        # whole program's time (the others' leave a gather, scatter or reduce-window out)
        est = [abs(r["err"]) for r in rs if not r["unestimated"]]
        summary[c] = {"n": len(rs), "median_abs_err": pct(ae, 0.5), "p90_abs_err": pct(ae, 0.9),
                      "n_estimated": len(est), "median_abs_err_estimated": pct(est, 0.5),
                      "p90_abs_err_estimated": pct(est, 0.9),
                      "n_without_xprefetch": len(full), "median_abs_err_without_xprefetch": pct(fe_, 0.5),
                      "p90_abs_err_without_xprefetch": pct(fe_, 0.9),
                      "ops_ratio_median": pct([r["tpusim_ops"] / max(1, r["compiler_ops"]) for r in rs], 0.5),
                      "median_err": pct([r["err"] for r in rs], 0.5), "within_10pct": sum(e <= 0.10 for e in ae),
                      "within_25pct": sum(e <= 0.25 for e in ae), "fusions_matched": len(fz),
                      "fusion_median_abs_err": pct(fe, 0.5), "fusion_p90_abs_err": pct(fe, 0.9),
                      # each matched fusion's |error| weighted by the compiler's time for it:
                      # the share of the matched time tpusim misplaces (small kernels weigh little)
                      "fusion_time_weighted_abs_err": (sum(abs(ts - cs) for _, cs, ts in fz) / sum(cs for _, cs, _ in fz)
                                                       if fz else float("nan")),
                      "mem_n": len(mem), "mem_median_abs_err": pct([abs(x) for x in mem], 0.5),
                      "mem_median_err": pct(mem, 0.5)}
        s = summary[c]
        print(f"\n== {c} (tpusim --chip {PRESET.get(c, c)}; compiler {recs[rs[0]['name']]['chips'][c].get('topology', '?')} "
              f"device, cycles at {COMPILER_CLOCK[c] / 1e9:.2f} GHz)")
        print(f"  programs n={s['n']}: median |err| {100 * s['median_abs_err']:.1f}%  p90 |err| "
              f"{100 * s['p90_abs_err']:.1f}%  signed median {100 * s['median_err']:+.1f}%  "
              f"within 10%: {s['within_10pct']}  within 25%: {s['within_25pct']}")
        print(f"  programs whose every op of 1 MiB or more the compiler estimated n={s['n_estimated']}: median |err| "
              f"{100 * s['median_abs_err_estimated']:.1f}%  p90 |err| {100 * s['p90_abs_err_estimated']:.1f}%")
        print(f"  credible compiler estimates only, without the {s['n'] - s['n_without_xprefetch']} programs whose "
              f"estimate leaves work out (a cross-program prefetch: a parameter copied into VMEM by an async copy "
              f"outside the per-op sum, taking > 10% of its time at the preset's streaming rate, that tpusim does "
              f"not prefetch as well; an op of 1 MiB or more without an estimate; an op estimated below the "
              f"time its HBM bytes take at the published bandwidth; or a sum below "
              f"half of the compiler's own optimal_seconds): "
              f"n={s['n_without_xprefetch']} median |err| {100 * s['median_abs_err_without_xprefetch']:.1f}%  "
              f"p90 |err| {100 * s['p90_abs_err_without_xprefetch']:.1f}%")
        same = [abs(r["err"]) for r in rs if r["tpusim_ops"] <= r["compiler_ops"]]
        more = [abs(r["err"]) for r in rs if r["tpusim_ops"] > r["compiler_ops"]]
        s.update({"n_same_ops": len(same), "median_abs_err_same_ops": pct(same, 0.5), "p90_abs_err_same_ops": pct(same, 0.9),
                  "n_more_ops": len(more), "median_abs_err_more_ops": pct(more, 0.5)})
        print(f"  top-level ops: tpusim / compiler, median {s['ops_ratio_median']:.2f}; where tpusim runs no more "
              f"kernels than the compiler has fusions n={len(same)} median |err| {100 * pct(same, 0.5):.1f}% p90 "
              f"{100 * pct(same, 0.9):.1f}%, where it runs more (the compiler's multi-output fusions) n={len(more)} "
              f"median |err| {100 * pct(more, 0.5):.1f}%")
        cats = sorted(set(r["category"] for r in rs))
        for cat in cats:
            cr = [r for r in rs if r["category"] == cat]
            print(f"    {cat:13s} n={len(cr):3d}  median |err| {100 * pct([abs(r['err']) for r in cr], 0.5):6.1f}%  "
                  f"signed median {100 * pct([r['err'] for r in cr], 0.5):+7.1f}%")
        print(f"  {'ops matched by name' if a.compiled else 'fusions matched by op_name'}: {s['fusions_matched']}  median |err| "
              f"{100 * s['fusion_median_abs_err']:.1f}%  p90 {100 * s['fusion_p90_abs_err']:.1f}%  "
              f"weighted by the compiler's time {100 * s['fusion_time_weighted_abs_err']:.1f}%")
        print(f"  HBM footprint (tpusim hbm_peak vs argument+output+temp-alias) n={s['mem_n']}: "
              f"median |diff| {100 * s['mem_median_abs_err']:.1f}%  signed median {100 * s['mem_median_err']:+.1f}%")
        print(f"  worst programs:")
        for r in sorted(rs, key=lambda r: -abs(r["err"]))[:a.worst]:
            print(f"    {r['name']:44s} tpusim {1e6 * r['tpusim_s']:10.1f} us  compiler {1e6 * r['compiler_s']:10.1f} us"
                  f"  {100 * r['err']:+7.1f}%  ops {r['tpusim_ops']}/{r['compiler_ops']}"
                  + ("  (x-prefetch %.0f MB)" % (r["cross_program_prefetch_bytes"] / 1e6)
                     if r["cross_program_prefetch_bytes"] else "")
                  + ("  (below its own roofline)" if r["below_own_roofline"] else "")
                  + ("  (no estimate for %s)" % ", ".join(r["unestimated"]) if r["unestimated"] else "")
                  + ("  (below HBM bandwidth: %s)" % ", ".join(r["below_bandwidth"][:3]) if r["below_bandwidth"] else "")
                  + f"  [{r['split']}]")
    if failures:
        print("\nfailed runs:")
        for c, n, e in failures:
            print(f"  {c} {n}: {e}")
    if a.markdown:
        print("\n| generation (tpusim preset) | n | median abs err | p90 abs err | signed median | within 10 % | within 25 % "
              "| every op estimated n | median | p90 "
              "| credible n | median | p90 | " + ("ops matched by name" if a.compiled else "fusion keys matched")
              + " | median | p90 | HBM footprint: median abs diff |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c, x in summary.items():
            print(f"| {c} ({PRESET.get(c, c)}) | {x['n']} | {100 * x['median_abs_err']:.1f} % | {100 * x['p90_abs_err']:.1f} % "
                  f"| {100 * x['median_err']:+.1f} % | {x['within_10pct']} | {x['within_25pct']} "
                  f"| {x['n_estimated']} | {100 * x['median_abs_err_estimated']:.1f} % | {100 * x['p90_abs_err_estimated']:.1f} % "
                  f"| {x['n_without_xprefetch']} "
                  f"| {100 * x['median_abs_err_without_xprefetch']:.1f} % | {100 * x['p90_abs_err_without_xprefetch']:.1f} % "
                  f"| {x['fusions_matched']} | {100 * x['fusion_median_abs_err']:.1f} % | {100 * x['fusion_p90_abs_err']:.1f} % "
                  f"| {100 * x['mem_median_abs_err']:.1f} % |")
        cats = sorted(set(r["category"] for r in rows))
        print("\n| category | " + " | ".join(f"{c} median abs (signed)" for c in summary) + " |")
        print("|---|" + "---|" * len(summary))
        for cat in cats:
            cells = []
            for c in summary:
                cr = [r for r in rows if r["chip"] == c and r["category"] == cat]
                cells.append(f"{100 * pct([abs(r['err']) for r in cr], 0.5):.0f} % ({100 * pct([r['err'] for r in cr], 0.5):+.0f} %)"
                             if cr else "-")
            n = len([r for r in rows if r["chip"] == next(iter(summary)) and r["category"] == cat])
            print(f"| {cat} ({n}) | " + " | ".join(cells) + " |")
    mode = "compiled" if a.compiled else "own"
    if a.json:
        doc = {"corpus": os.path.basename(os.path.normpath(a.corpus)), "mode": mode, "chips": chips,
               "tolerance": "test split: median and p90 |error| may grow by max(1 point, 2 % of the value); "
                            "accepted programs may not drop",
               "splits": sp_out, "families": sp_fams, "refusals": sp_ref, "summary": summary, "failures": failures,
               "programs": {f"{r['name']} {r['chip']}": [r["split"], r["tpusim_s"], r["compiler_s"]] for r in rows}}
        if not a.compact:
            doc["rows"] = rows
        json.dump(doc, open(a.json, "w"), indent=None if a.compact else 1, sort_keys=a.compact,
                  separators=(",", ":") if a.compact else None)
    print("\nsummary: " + "  ".join(f"{c}: median {100 * s['median_abs_err']:.1f}% p90 {100 * s['p90_abs_err']:.1f}% "
                                    f"(n={s['n']})" for c, s in summary.items()))
    print("every op estimated: " + "  ".join(
        f"{c}: median {100 * s['median_abs_err_estimated']:.1f}% p90 {100 * s['p90_abs_err_estimated']:.1f}% "
        f"(n={s['n_estimated']})" for c, s in summary.items()))
    print("credible compiler estimates: " + "  ".join(
        f"{c}: median {100 * s['median_abs_err_without_xprefetch']:.1f}% p90 {100 * s['p90_abs_err_without_xprefetch']:.1f}% "
        f"(n={s['n_without_xprefetch']})" for c, s in summary.items()))
    if a.check:
        return 0 if check(a.check, sp_out, mode) else 1
    return 0 if rows and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
