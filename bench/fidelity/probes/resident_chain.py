#!/usr/bin/env python3
"""resident_chain.py [GEN]: a kernel kept in VMEM (operand and result in S(1)) that also reads a
scale, by the XLA TPU compiler (libtpu, compile-only) and by tpusim on the compiled program,
outside the bench/fidelity corpora (session 16, mdl2; lower.c lower_stream `on_chip` cites it).

The chain exp(x) -> opt-barrier -> x * scale -> opt-barrier -> sum over the last dimension
keeps the middle kernel VMEM to VMEM; its scale is a constant, an f32 parameter (the compiler
copies it in with copy-start / copy-done), a bf16 parameter's convert (a kernel of its own),
or a whole f32 operand of x's shape (copied in too). Prints per case the compiler's
estimated_cycles of the middle kernel and tpusim's cycles for the op of the same name.
Default GEN v5e."""
import json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import PRESET, TOPO, TPUSIM, compile_hlo  # noqa: E402


def chain(scale, b):
    s = "f32[%d,128,512]" % b
    sdef = {"const": " one = f32[] constant(1.5)\n sv = f32[512] broadcast(one), dimensions={}\n",
            "param": " sv = f32[512] parameter(1)\n",
            "cvt": " sp = bf16[512] parameter(1)\n sv = f32[512] convert(sp)\n",
            "whole": " sv = %s parameter(1)\n" % s}[scale]
    bcast = " b = %s negate(sv)\n" % s if scale == "whole" else " b = %s broadcast(sv), dimensions={2}\n" % s
    return ("HloModule p\nadd {\n a = f32[] parameter(0)\n c = f32[] parameter(1)\n ROOT s = f32[] add(a, c)\n}\n"
            "ENTRY e {\n x = %s parameter(0)\n%s t1 = %s exponential(x)\n o1 = (%s) opt-barrier((%s) tuple(t1))\n"
            " g1 = %s get-tuple-element(o1), index=0\n%s t2 = %s multiply(g1, b)\n o2 = (%s) opt-barrier((%s) tuple(t2))\n"
            " g2 = %s get-tuple-element(o2), index=0\n z = f32[] constant(0)\n"
            " ROOT r = f32[%d,128] reduce(g2, z), dimensions={2}, to_apply=add\n}\n"
            % (s, sdef, s, s, s, s, bcast, s, s, s, s, b))


def middle(text):
    """The compiler's middle kernel (the fusion reading t1) and its estimated_cycles."""
    for line in text.splitlines():
        m = re.match(r"\s*%(\S+) = f32\[\d+,128,512\]\S* fusion\(%t1", line)
        if m:
            return m.group(1), int(re.search(r'"estimated_cycles":"(\d+)"', line).group(1))
    return None, None


def tpusim_op(text, gen, name, d):
    path, rep = os.path.join(d, "c.hlo"), os.path.join(d, "r.json")
    open(path, "w").write(text)
    subprocess.run([TPUSIM, "run", path, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                    "--quiet"], capture_output=True, env=dict(os.environ, TPUSIM_CACHE="off"))
    r = json.load(open(rep))
    rows = r.get("ops") or r.get("profile") or []
    for o in rows:
        if o.get("name") == name:
            return o.get("cycles")
    return None


def main():
    gen = sys.argv[1] if len(sys.argv) > 1 else "v5e"
    with tempfile.TemporaryDirectory() as d:
        for b in (8, 32):
            for scale in ("const", "param", "cvt", "whole"):
                _, out = compile_hlo(chain(scale, b), TOPO[gen], d)
                if out is None:
                    print(f"B={b} {scale}: libtpu unavailable")
                    continue
                name, comp = middle(out)
                ts = tpusim_op(out, gen, name, d)
                print(f"B={b:2d} scale {scale:5s} {name}: compiler {comp} cycles, tpusim {ts}")


if __name__ == "__main__":
    main()
