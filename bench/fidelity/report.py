#!/usr/bin/env python3
"""report.py: a Markdown report of compare.py's --json output for one corpus, in both modes
(tpusim's own compilation and the compiler's compiled programs): per split (test first) and
generation, per family, the worst programs per generation with tpusim's and the compiler's
cycles, and every refusal class with its count.

    python3 bench/fidelity/compare.py --corpus bench/fidelity/families --json /tmp/own.json
    python3 bench/fidelity/compare.py --corpus bench/fidelity/families --compiled --json /tmp/compiled.json
    python3 bench/fidelity/report.py /tmp/own.json /tmp/compiled.json [--worst 10] > report.md
    python3 bench/fidelity/report.py --short /tmp/own.json /tmp/compiled.json   # docs/fidelity.md's tables"""
import argparse, json, math


def f1(x):
    return "-" if x is None or x != x else f"{100 * x:.1f} %"


def section(doc, title, worst):
    out = [f"## {title}: {doc['corpus']}, mode {doc['mode']}", ""]
    chips = [c for c in doc["chips"] if c in doc["splits"]["all"]]
    for sp in ("test", "tune", "all"):
        s = doc["splits"].get(sp, {})
        if not s:
            continue
        out += [f"### {sp} split", "", "| generation | programs | accepted | refused | no compiler figure | judged | "
                "median abs err | p90 abs err | signed median | within 10 % | within 25 % | loops judged | credible n | median | p90 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in chips:
            v = s.get(c)
            if v:
                out.append(f"| {c} | {v['programs']} | {v['accepted']} | {v['refused']} | {v['not_judged']} | {v['n']} | "
                           f"{f1(v['median_abs_err'])} | {f1(v['p90_abs_err'])} | {f1(v['median_err'])} | "
                           f"{v['within_10pct']} | {v['within_25pct']} | {v['loops_judged']} | {v['n_credible']} | "
                           f"{f1(v['median_abs_err_credible'])} | {f1(v['p90_abs_err_credible'])} |")
        out.append("")
        fams = doc["families"][sp]
        key = lambda fam: -max((x["median_abs_err"] for x in fams[fam].values() if x["n"]), default=-1)
        out += [f"Per family ({sp}), worst first: median abs err (signed median) [p90]; refused programs as r=N",
                "", "| family | n | " + " | ".join(chips) + " |", "|---|---|" + "---|" * len(chips)]
        for fam in sorted(fams, key=key):
            cells = []
            for c in chips:
                x = fams[fam].get(c)
                if not x:
                    cells.append("-")
                    continue
                cell = f"{f1(x['median_abs_err'])} ({f1(x['median_err'])}) [{f1(x['p90_abs_err'])}]" if x["n"] else "-"
                if x["refused"]:
                    cell += f" r={x['refused']}"
                if x["not_judged"]:
                    cell += f" loop={x['not_judged']}"
                cells.append(cell)
            n = max(x["n"] + x["refused"] + x["not_judged"] for x in fams[fam].values())
            out.append(f"| {fam} | {n} | " + " | ".join(cells) + " |")
        out.append("")
    rows = doc.get("rows", [])
    if rows:
        out += [f"### The {worst} worst programs per generation (all splits; error = tpusim / compiler - 1)", ""]
        for c in chips:
            rs = sorted([r for r in rows if r["chip"] == c and r["compiler_s"] > 0], key=lambda r: -abs(r["err"]))[:worst]
            out += [f"{c}:", "", "| program | family | split | tpusim cycles | compiler cycles | tpusim µs | compiler µs | error | "
                    "ops tpusim/compiler | compiler leaves out |", "|---|---|---|---|---|---|---|---|---|---|"]
            for r in rs:
                notes = []
                if r.get("unestimated"):
                    notes.append("no estimate: " + ", ".join(r["unestimated"][:3]))
                if r.get("below_bandwidth"):
                    notes.append("below HBM bw: " + ", ".join(r["below_bandwidth"][:3]))
                if r.get("below_own_roofline"):
                    notes.append("below its roofline")
                if r.get("cross_program_prefetch_bytes"):
                    notes.append(f"x-prefetch {r['cross_program_prefetch_bytes'] / 1e6:.0f} MB")
                out.append(f"| {r['name']} | {r['family']} | {r['split']} | {r['tpusim_cycles']} | {r['compiler_cycles']} | "
                           f"{1e6 * r['tpusim_s']:.1f} | {1e6 * r['compiler_s']:.1f} | {100 * r['err']:+.0f} % | "
                           f"{r['tpusim_ops']}/{r['compiler_ops']} | {'; '.join(notes)} |")
            out.append("")
    ref = doc.get("refusals", {})
    if ref:
        out += ["### Refusals (tpusim exited non-zero), by message class", "", "| " + " | ".join(chips) +
                " | class | example program: message |", "|" + "---|" * (len(chips) + 2)]
        classes = sorted(set(k for c in ref for k in ref[c]), key=lambda k: -sum(ref[c].get(k, [0])[0] for c in ref))
        for k in classes:
            ex = next(ref[c][k] for c in ref if k in ref[c])
            out.append("| " + " | ".join(str(ref[c][k][0]) if k in ref.get(c, {}) else "0" for c in chips) +
                       f" | {k[:140].replace('|', '/')} | {ex[1]}: {ex[2][:160].replace('|', '/')} |")
        out.append("")
    return out


def short(docs, nfam=10):
    """The short tables of docs/fidelity.md: per split and mode, median / p90 |error| per
    generation and refusals; the worst families; the refusal classes."""
    chips = docs[0]["chips"]
    out = ["| split | mode | programs | " + " | ".join(f"{c} median / p90 (refused)" for c in chips) + " |",
           "|---|---|---|" + "---|" * len(chips)]
    for sp in ("test", "tune", "all"):
        for d in docs:
            s = d["splits"].get(sp, {})
            if not s:
                continue
            n = max(v["programs"] for v in s.values())
            cells = [f"{f1(s[c]['median_abs_err'])} / {f1(s[c]['p90_abs_err'])} ({s[c]['refused']})" if c in s else "-"
                     for c in chips]
            out.append(f"| **{sp}** | {'own compilation' if d['mode'] == 'own' else '--compiled'} | {n} | " + " | ".join(cells) + " |")
    out += ["", f"The {nfam} worst families (all splits), median |error| per generation, own compilation / --compiled:", "",
            "| family | n | " + " | ".join(chips) + " |", "|---|---|" + "---|" * len(chips)]
    fo = docs[0]["families"]["all"]
    fc = docs[1]["families"]["all"] if len(docs) > 1 else {}
    key = lambda fam: -sorted(x["median_abs_err"] for x in fo[fam].values() if x["n"])[len([1 for x in fo[fam].values() if x["n"]]) // 2] \
        if any(x["n"] for x in fo[fam].values()) else 0
    for fam in sorted(fo, key=key)[:nfam]:
        n = max(x["n"] + x["refused"] + x["not_judged"] for x in fo[fam].values())
        cells = []
        for c in chips:
            a, b = fo[fam].get(c), fc.get(fam, {}).get(c)
            cells.append(f"{f1(a['median_abs_err']) if a and a['n'] else '-'} / {f1(b['median_abs_err']) if b and b['n'] else '-'}")
        out.append(f"| {fam} | {n} | " + " | ".join(cells) + " |")
    for d in docs:
        ref = d.get("refusals", {})
        if not ref:
            continue
        out += ["", f"Refusals ({'own compilation' if d['mode'] == 'own' else '--compiled'}), by class, programs per generation:", "",
                "| " + " | ".join(chips) + " | message |", "|" + "---|" * (len(chips) + 1)]
        classes = sorted(set(k for c in ref for k in ref[c]), key=lambda k: -sum(ref[c].get(k, [0])[0] for c in ref))
        for k in classes:
            out.append("| " + " | ".join(str(ref[c][k][0]) if k in ref.get(c, {}) else "0" for c in chips) +
                       f" | {k[:150].replace('|', '/')} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--worst", type=int, default=10)
    ap.add_argument("--short", action="store_true", help="the short tables of docs/fidelity.md (own, then compiled)")
    a = ap.parse_args()
    if a.short:
        print("\n".join(short([json.load(open(p)) for p in a.json])))
        return
    out = []
    for p in a.json:
        doc = json.load(open(p))
        out += section(doc, "tpusim's own compilation" if doc["mode"] == "own" else "the compiler's compiled programs", a.worst)
    print("\n".join(out))


if __name__ == "__main__":
    main()
