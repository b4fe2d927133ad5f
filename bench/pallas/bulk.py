#!/usr/bin/env python3
"""bulk.py: user-style Pallas TPU kernels generated in bulk (not tuned on), one family of
patterns a file (bulk_*.py beside this one): each family crosses a kernel pattern with its
variants (element types, block shapes, grid orders and semantics, ops inside the body), so the
held-out kinds are covered by many instances instead of one each. Every case is lowered for a
TPU, decoded, run on tpusim (reference and TPU back ends) against Pallas's interpret mode on
CPU, and timed on v5e, v5p and v6e, exactly as user.py runs its hand-written kernels (its
tolerances and its tune/test split: the parity of the first byte of sha1(name)).

    PYTHONPATH=python python3 bench/pallas/bulk.py [--list] [--json OUT] [--no-time] [--prep] [SUBSTRING...]

BULK_CACHE=DIR keeps each case's lowered program and interpret-mode values there (--prep: only those).

One line a case; the summary counts, per split (test first): cases, lowered (Mosaic/Pallas
refusing a kernel is the kernel's fault, not tpusim's), run on both back ends, within tolerance
on both, timed on the three chips."""
import functools
import json
import pickle
import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import jax  # noqa: E402
import user  # noqa: E402  (its environment set-up, lowering, tolerance and split)

FAMILIES = ["bulk_ew", "bulk_red", "bulk_layout", "bulk_mm", "bulk_ctrl", "bulk_mem", "bulk_bits", "bulk_pipe", "bulk_misc", "bulk_emit"]


def all_cases():
    out = []
    for fam in FAMILIES:
        mod = __import__(fam)
        for name, fn, make_args in mod.cases():
            out.append((fam, name, fn, make_args))
    names = [c[1] for c in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SystemExit("bulk.py: duplicate case names: %s" % sorted(dup))
    return out


def run_case(name, fn, make_args, timed=True, prep_only=False):
    rec = {"name": name, "split": user.split(name)}
    args = make_args(np.random.default_rng(zlib.crc32(name.encode())))
    inputs = [np.asarray(a, np.float32) if a.dtype == jax.numpy.bfloat16 else np.asarray(a) for a in args]
    cache = os.environ.get("BULK_CACHE")  # a folder keeping each case's lowered text and interpret values
    cfile = os.path.join(cache, name + ".pkl") if cache else None
    if cfile and os.path.exists(cfile):
        with open(cfile, "rb") as f:
            got = pickle.load(f)
    else:
        got = {}
        try:
            got["text"] = user.lower(fn, args)
            cpu_args = [jax.device_put(a, jax.devices("cpu")[0]) for a in args]
            try:
                with jax.default_device(user.tpu_device()):
                    got["want"] = [np.asarray(w) for w in jax.tree_util.tree_leaves(
                        jax.jit(functools.partial(fn, interpret=True))(*cpu_args))]
            except Exception as e:  # noqa: BLE001
                got["interpret"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        except Exception as e:  # noqa: BLE001
            got["lower"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        if cfile:
            os.makedirs(cache, exist_ok=True)
            with open(cfile, "wb") as f:
                pickle.dump(got, f)
    for k in ("lower", "interpret"):
        if k in got:
            rec[k] = got[k]
            return rec
    if prep_only:
        return rec
    import tpusim
    text, want = got["text"], got["want"]
    for backend in ("ref", "tpu"):
        try:
            outs, _ = tpusim.run(text, inputs, backend=backend, chip="v5e")
            rec[backend] = max(user.worst_err(o, w) for o, w in zip(outs, want))
        except Exception as e:  # noqa: BLE001
            rec[backend] = "FAIL: " + str(e).splitlines()[0][-200:]
    if timed:
        for chip in ("v5e", "v5p", "v6e"):
            try:
                _, rep = tpusim.run(text, inputs, chip=chip)
                rec[chip] = rep.step_time_s * 1e6
            except Exception as e:  # noqa: BLE001
                rec[chip] = "FAIL: " + str(e).splitlines()[0][-160:]
    return rec


def fmt(rec):
    s = "%-52s %-4s " % (rec["name"], rec["split"])
    if "lower" in rec:
        return s + "LOWER FAILED: " + rec["lower"]
    if "interpret" in rec:
        return s + "INTERPRET FAILED: " + rec["interpret"]
    parts = []
    for b in ("ref", "tpu"):
        if b not in rec:
            return s + "lowered"
        v = rec[b]
        parts.append("%s %s" % (b, v if isinstance(v, str) else "%.2g" % v))
    for c in ("v5e", "v5p", "v6e"):
        if c in rec:
            v = rec[c]
            parts.append("%s %s" % (c, v if isinstance(v, str) else "%.2fus" % v))
    return s + " | ".join(parts)


def ok_values(rec):
    return all(not isinstance(rec.get(b), str) and rec.get(b) is not None and rec[b] <= 1.0 for b in ("ref", "tpu"))


def summary(recs, timed):
    lines = []
    for sp in ("test", "tune"):
        rs = [r for r in recs if r["split"] == sp]
        low = [r for r in rs if "lower" not in r and "interpret" not in r]
        ran = [r for r in low if not any(isinstance(r.get(b), str) for b in ("ref", "tpu"))]
        ok = [r for r in low if ok_values(r)]
        line = "%s: %d cases, %d lowered, %d run on both back ends, %d within tolerance" % (
            sp, len(rs), len(low), len(ran), len(ok))
        if timed:
            t = [r for r in low if all(isinstance(r.get(c), float) for c in ("v5e", "v5p", "v6e"))]
            line += ", %d timed on v5e/v5p/v6e" % len(t)
        lines.append(line)
    return lines


def main(argv):
    timed = "--no-time" not in argv
    out = None
    if "--json" in argv:
        out = argv[argv.index("--json") + 1]
        argv = [a for a in argv if a not in ("--json", out)]
    subs = [a for a in argv if not a.startswith("--")]
    cases = [c for c in all_cases() if not subs or any(s in c[1] for s in subs)]
    cases.sort(key=lambda c: (user.split(c[1]) != "test", c[1]))
    if "--list" in argv:
        for fam, name, _, _ in cases:
            print("%-12s %-52s %s" % (fam, name, user.split(name)))
        print("%d cases" % len(cases))
        return
    recs = []
    for fam, name, fn, make_args in cases:
        rec = run_case(name, fn, make_args, timed, "--prep" in argv)
        rec["family"] = fam
        recs.append(rec)
        print(fmt(rec), flush=True)
    for line in summary(recs, timed):
        print(line)
    if out:
        with open(out, "w") as f:
            json.dump(recs, f, indent=0)


if __name__ == "__main__":
    main(sys.argv[1:])
