#!/usr/bin/env python3
"""dus_siblings.py [CHIPS]: libtpu probes of a scan step that writes K stacked outputs at the
step's position (an LSTM forward's residual stacks): does the XLA TPU compiler update them in
one multi-output fusion (fuse_ops.c tpu__fuse_dus_same_start), and does it when half of them
are written one row further on (a different start index)? Each case is a while loop of 16 steps
over dt[rows,lanes] h: g_j = f_j(tanh(h)) (exp, x*x, 1-x, ...), stack j updated with g_j at i
(or at i+1 for odd j when `shifted`), h carried on as the sum of the g_j. One JSON line per
(case, chip): the compiled body's fusions holding dynamic-update-slices and how many each
holds, and tpusim's body kernels (tpusim compile --dump-after fuse). Appends to
data/dus_siblings.jsonl."""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from libtpu import TPUSIM, each_compiled, chips_arg

FN = ["exponential(a)", "multiply(a, a)", "subtract(one, a)", "negate(a)", "add(a, one)", "multiply(a, one)"]


def scan(dt, rows, lanes, k, shifted):
    st = f"{dt}[17,{rows},{lanes}]"
    v = f"{dt}[{rows},{lanes}]"
    tt = "(s32[], " + v + "".join(", " + st for _ in range(k)) + ")"
    body = (f"body {{\n  s = {tt} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
            f"  h = {v} get-tuple-element(s), index=1\n  z = s32[] constant(0)\n  c1 = s32[] constant(1)\n"
            f"  i1 = s32[] add(i, c1)\n  o = {dt}[] constant(1)\n  one = {v} broadcast(o), dimensions={{}}\n"
            f"  a = {v} tanh(h)\n")
    acc = "a"
    for j in range(k):
        body += (f"  S{j} = {st} get-tuple-element(s), index={j + 2}\n  g{j} = {v} {FN[j % len(FN)]}\n"
                 f"  r{j} = {dt}[1,{rows},{lanes}] reshape(g{j})\n"
                 f"  U{j} = {st} dynamic-update-slice(S{j}, r{j}, {'i1' if shifted and j % 2 else 'i'}, z, z)\n"
                 f"  n{j} = {v} add({acc}, g{j})\n")
        acc = f"n{j}"
    body += f"  ROOT r = {tt} tuple(i1, {acc}{''.join(f', U{j}' for j in range(k))})\n}}\n"
    cond = (f"cond {{\n  s = {tt} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
            f"  n = s32[] constant(16)\n  ROOT c = pred[] compare(i, n), direction=LT\n}}\n")
    entry = (f"ENTRY main {{\n  h0 = {v} parameter(0)\n" + "".join(f"  A{j} = {st} parameter({j + 1})\n" for j in range(k))
             + f"  i0 = s32[] constant(0)\n  t = {tt} tuple(i0, h0{''.join(f', A{j}' for j in range(k))})\n"
             f"  ROOT l = {tt} while(t), condition=cond, body=body\n}}\n")
    return "HloModule scan\n\n" + cond + "\n" + body + "\n" + entry


def compiled_body(comp):
    """The compiled while body's text (the computation named as body= of the entry's while)."""
    m = re.search(r"while\([^)]*\), condition=%?[\w.\-]+, body=%?([\w.\-]+)", comp)
    if not m:
        return ""
    b = re.search(r"\n%?" + re.escape(m.group(1)) + r" [^\n]*\{\n(.*?)\n\}", comp, re.S)
    return b.group(1) if b else ""


def dus_per_fusion(comp):
    """For each fusion the body calls, how many dynamic-update-slices its computation holds."""
    body = compiled_body(comp)
    out = []
    for m in re.finditer(r"= [^\n]* fusion\([^\n]*calls=%?([\w.\-]+)", body):
        c = re.search(r"\n%?" + re.escape(m.group(1)) + r" [^\n]*\{\n(.*?)\n\}", comp, re.S)
        n = len(re.findall(r" dynamic-update-slice\(", c.group(1))) if c else 0
        if n:
            out.append(n)
    out += [1] * len(re.findall(r"^\s*%?[\w.\-]+ = [^\n]* dynamic-update-slice\(", body, re.M))
    return sorted(out, reverse=True)


def tpusim_body(text, chip):
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
        f.write(text)
    try:
        out = subprocess.run([TPUSIM, "compile", f.name, "--chip", chip, "--dump-after", "fuse"],
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    b = re.search(r"\nbody \{\n(.*?)\n\}", out, re.S)
    b = b.group(1) if b else ""
    dus = []
    for m in re.finditer(r"= [^\n]* fusion\([^\n]*calls=([\w.\-]+)", b):
        c = re.search(r"\n" + re.escape(m.group(1)) + r" \{\n(.*?)\n\}", out, re.S)
        n = len(re.findall(r" dynamic-update-slice\(", c.group(1))) if c else 0
        if n:
            dus.append(n)
    dus += [1] * len(re.findall(r" dynamic-update-slice\(", b))
    return sorted(dus, reverse=True), len(re.findall(r" fusion\(", b)) + len(re.findall(r" dynamic-update-slice\(", b))


CASES = [("f32", 32, 256, 2, 0), ("f32", 32, 256, 4, 0), ("f32", 32, 256, 6, 0), ("bf16", 16, 512, 4, 0),
         ("f32", 8, 1024, 3, 0), ("f32", 32, 256, 4, 1), ("bf16", 16, 512, 4, 1)]


def main():
    chips = chips_arg(sys.argv)
    out = open(os.path.join(HERE, "data", "dus_siblings.jsonl"), "a")
    for case, chip, text, own, summ, comp in each_compiled(CASES, scan, chips):
        tdus, tk = tpusim_body(text, chip)
        rec = dict(case=case, chip=chip, compiler_dus_fusions=dus_per_fusion(comp), tpusim_dus_fusions=tdus,
                   tpusim_body_kernels=tk)
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
