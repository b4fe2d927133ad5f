#!/usr/bin/env python3
"""hbm_rows_corpus.py [DIR...]: the compiled corpora's lane-moving copies and transposes (the
entry's `copy`/`transpose` whose operand and result lay different dimensions in the lanes),
with the memory space of each side, their rows of 128 lanes (each side's elements over its
minor dimension, that dimension in blocks of 128) and the compiler's cycles per row of the two
sides after the kernel start (kov), per TensorCore of the compiled device (v5p: two). Prints one
line per copy and, per generation and split, the quantiles of cycles per core-row of the
HBM-to-HBM copies of 15 K cycles or more (copy_kind.c tpu__relayout_rows,
hbm_relayout_row_cycles)."""
import glob, gzip, hashlib, json, math, os, re, statistics, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
KOV = {"v4": 84.0, "v5e": 963.0, "v5p": 1181.25, "v6e": 1137.5}
CORES = {"v4": 1, "v5e": 1, "v5p": 2, "v6e": 1}


def split_of(name):
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


SHAPE = re.compile(r"(\w+)\[([\d,]*)\](?:\{([\d,]*)(:[^}]*)?\})?")


def parse(s):
    m = SHAPE.match(s)
    if not m or m.group(1) in ("token",):
        return None
    dims = [int(x) for x in m.group(2).split(",")] if m.group(2) else []
    mm = [int(x) for x in m.group(3).split(",")] if m.group(3) else list(range(len(dims) - 1, -1, -1))
    tail = m.group(4) or ""
    return dims, mm, tail, m.group(1)


def moving(dims, mm):
    return [d for d in mm if dims[d] > 1]


def rows(dims, mm):
    n = math.prod(dims)
    mi = dims[mm[0]] if mm else 1
    return n // mi * math.ceil(mi / 128) if mi else 0


def space(tail):
    return "VMEM" if "S(1)" in tail else "CMEM" if "S(3)" in tail else "HBM"


def main():
    dirs = sys.argv[1:] or [os.path.join(ROOT, "bench/fidelity/families/compiled"), os.path.join(ROOT, "bench/fidelity/compiled")]
    per = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.hlo*"))):
            base = os.path.basename(path)
            m = re.match(r"(.+)\.(v4|v5e|v5p|v6e)\.hlo(\.gz)?$", base)
            if not m:
                continue
            prog, gen = m.group(1), m.group(2)
            text = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read()
            ent = text[text.rfind("\nENTRY"):]
            shapes = {}
            for line in ent.splitlines()[1:]:
                mm_ = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) (\S+?)\((.*)", line)
                if not mm_:
                    continue
                name, shp, op, rest = mm_.groups()
                shapes[name] = shp
                if op not in ("copy", "transpose"):
                    continue
                e = re.search(r'"estimated_cycles":"(\d+)"', line)
                a = re.match(r"%([^,)\s]+)", rest)
                if not e or not a or a.group(1) not in shapes:
                    continue
                r, o = parse(shp), parse(shapes[a.group(1)])
                if not r or not o or len(r[0]) != len(o[0]):
                    continue
                mr, mo = moving(r[0], r[1]), moving(o[0], o[1])
                if not mr or not mo or mr[0] == mo[0]:
                    continue  # keeps the lanes
                if op == "copy" and r[0] != o[0]:
                    continue
                rr, ro = rows(r[0], r[1]), rows(o[0], o[1])
                small = min(r[0][r[1][0]], o[0][o[1][0]]) < 16
                cyc = int(e.group(1))
                sp = space(o[2]) + ">" + space(r[2])
                cr = (rr + ro) / CORES[gen]
                pcr = (cyc - KOV[gen]) / cr if cr else 0
                tr = re.search(r"T\((\d+),(\d+)\)", r[2]); to = re.search(r"T\((\d+),(\d+)\)", o[2])
                print(json.dumps({"prog": prog, "gen": gen, "split": split_of(prog), "op": name, "from": shapes[a.group(1)],
                                  "to": shp, "space": sp, "cycles": cyc, "rows": rr + ro, "per_core_row": round(pcr, 3),
                                  "small_minor": small}))
                if sp == "HBM>HBM" and not small and cyc >= 15000:
                    per.setdefault((gen, split_of(prog)), []).append(pcr)
    for k in sorted(per):
        v = sorted(per[k])
        q = lambda f: v[min(len(v) - 1, int(f * len(v)))]
        print(f"# {k[0]} {k[1]}: {len(v)} HBM>HBM copies >= 15K cycles, cycles a core-row min {v[0]:.3f} "
              f"p10 {q(0.1):.3f} median {statistics.median(v):.3f} p90 {q(0.9):.3f} max {v[-1]:.3f}")


if __name__ == "__main__":
    main()
