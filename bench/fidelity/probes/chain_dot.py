#!/usr/bin/env python3
"""chain_dot.py [GENS] [OUT.jsonl]: an LSTM-style step z = h @ U + x @ W + b (bf16 operands, f32
result) (z in f32 or in bf16) at shapes off the bench/fidelity corpora, by the XLA TPU compiler (libtpu, compile-only)
and by tpusim timing the compiled program. The compiler makes x @ W one kernel writing VMEM and
h @ U + that + b a second kernel whose operands (its dot's lhs and rhs copied in by the step's
copy-start / copy-done, the first kernel's result) and result all stay in VMEM. Prints per case
and kernel the compiler's estimated_cycles, where its operands and result live, and tpusim's
cycles for the kernel of the same name (session 32, scanbwd)."""
import json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import PRESET, TOPO, TPUSIM, compile_retry, emit  # noqa: E402

# (M, I, H): batch, input features, hidden features; the gates are 4H wide
CASES = [(8, 128, 128), (24, 384, 128), (48, 256, 384), (64, 640, 256), (96, 128, 512), (200, 256, 256),
         (40, 512, 640), (16, 1024, 256)]


def hlo(M, I, H, zt="f32"):
    """The step: z = x @ W + h @ U + b in f32 (zt "bf16": z kept in bf16, each gate converted
    in the cell), then the LSTM cell on z's four gate slices (so z stays in VMEM between the dot
    kernels and the cell's kernel); returns (h', c')."""
    if zt == "bf16":
        t = hlo(M, I, H)
        t = t.replace(" z = f32[%d,%d] convert(t)" % (M, 4 * H), " z = bf16[%d,%d] add(t, t)" % (M, 4 * H))
        t = re.sub(r"z(\d) = f32\[(\d+),(\d+)\] slice", r"zb\1 = bf16[\2,\3] slice", t)
        for k, at in ((0, " sg0 = "), (1, " sg1 = "), (2, " tg = "), (3, " sg3 = ")):
            t = t.replace(at, " z%d = f32[%d,%d] convert(zb%d)\n%s" % (k, M, H, k, at), 1)
        return t
    G = 4 * H
    g = lambda k: " z%d = f32[%d,%d] slice(z), slice={[0:%d], [%d:%d]}\n" % (k, M, H, M, k * H, (k + 1) * H)
    sig = lambda k: " sg%d = f32[%d,%d] logistic(z%d)\n" % (k, M, H, k)
    return ("HloModule p\nENTRY e {\n x = bf16[%d,%d] parameter(0)\n h = bf16[%d,%d] parameter(1)\n"
            " W = bf16[%d,%d] parameter(2)\n U = bf16[%d,%d] parameter(3)\n b = bf16[%d] parameter(4)\n"
            " c = f32[%d,%d] parameter(5)\n"
            " xw = bf16[%d,%d] dot(x, W), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            " hu = bf16[%d,%d] dot(h, U), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            " s = bf16[%d,%d] add(xw, hu)\n bb = bf16[%d,%d] broadcast(b), dimensions={1}\n"
            " t = bf16[%d,%d] add(s, bb)\n z = f32[%d,%d] convert(t)\n"
            % (M, I, M, H, I, G, H, G, G, M, H, M, G, M, G, M, G, M, G, M, G, M, G)
            + g(0) + g(1) + g(2) + g(3) + sig(0) + sig(1) + sig(3)
            + (" tg = f32[%d,%d] tanh(z2)\n fc = f32[%d,%d] multiply(sg1, c)\n ig = f32[%d,%d] multiply(sg0, tg)\n"
               " c2 = f32[%d,%d] add(fc, ig)\n tc = f32[%d,%d] tanh(c2)\n h2 = f32[%d,%d] multiply(sg3, tc)\n"
               " hb = bf16[%d,%d] convert(h2)\n ROOT r = (bf16[%d,%d], f32[%d,%d]) tuple(hb, c2)\n}\n"
               % ((M, H) * 9)))


def kernels(text):
    """[(name, estimated_cycles, operand spaces 'H'/'V', result space)] of the entry's fusions."""
    entry = text[text.rfind("\nENTRY"):]
    space = {}
    out = []
    for l in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) (\S+?)\((.*)$", l)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        space[name] = "V" if "S(1)" in shape.split("}")[0] + "}" else "H"
        if op == "fusion":
            args = re.findall(r"%([\w.\-]+)", rest.split(")", 1)[0])
            e = re.search(r'"estimated_cycles":"(\d+)"', l)
            out.append((name, int(e.group(1)) if e else None, "".join(space.get(a, "?") for a in args),
                        space[name]))
    return out


def main():
    gens = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5e", "v5p", "v6e"]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory() as d:
        for case in [c + (zt,) for zt in ("f32", "bf16") for c in CASES]:
            for g in gens:
                summ, comp = compile_retry(hlo(*case), TOPO[g], d)
                if comp is None:
                    continue
                src, rep = os.path.join(d, "c.hlo"), os.path.join(d, "r.json")
                open(src, "w").write(comp)
                subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(g, g), "--report", rep,
                                "--quiet"], check=True)
                sim = {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}
                for name, est, ins, res in kernels(comp):
                    emit(dict(case=list(case), gen=g, kernel=name, compiler=est, tpusim=sim.get(name), operands=ins,
                              result=res), out)


if __name__ == "__main__":
    main()
