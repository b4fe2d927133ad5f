#!/usr/bin/env python3
"""conv_reader.py [GEN,...]: where a kernel of elementwise ops over a convolution's result (a
batch norm's normalisation after its statistics, a residual add, a ReLU) writes a program's
result, by the XLA TPU compiler (libtpu, compile-only) and by tpusim's own compilation, on
shapes outside the bench/fidelity corpora (session 17, mdl; relayout.c read_conv cites them).

The compiler's convolution kernel writes its layout (spatial dimensions major, the batch in
the sublanes, the features in the lanes: {3,0,2,1}) and the kLoop kernel reading it writes the
same layout; where the program's result layout (the least padded, row-major when that pads no
more) differs, a `copy` relays it out after the kernel. Per case: whether the program ends in
that copy, for the compiler and for tpusim (its `copy.relayout` transpose), and both step
figures in cycles. Default GEN v5e."""
import os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, compile_hlo, tpusim_step_cycles, TPUSIM, PRESET  # noqa: E402

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"


def conv_norm(b, h, c, residual=True):
    """conv 3x3 (same), minus its per-feature sum, plus the input (residual), ReLU."""
    t = "%d,%d,%d,%d" % (b, h, h, c)
    res = (" xf = f32[%s] convert(x)\n a = f32[%s] add(d, xf)\n" % (t, t)) if residual else \
        (" a = f32[%s] multiply(d, d)\n" % t)
    return ("HloModule m\n" + ADD + "ENTRY e {\n x = bf16[%s] parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
            " c = bf16[%s] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
            " cf = f32[%s] convert(c)\n z = f32[] constant(0)\n s = f32[%d] reduce(cf, z), dimensions={0,1,2}, to_apply=add\n"
            " sb = f32[%s] broadcast(s), dimensions={3}\n d = f32[%s] subtract(cf, sb)\n%s"
            " zb = f32[%s] broadcast(z), dimensions={}\n m = f32[%s] maximum(a, zb)\n ROOT r = bf16[%s] convert(m)\n}\n"
            % (t, c, c, t, t, c, t, t, res, t, t, t))


CASES = [(8, 32, 128, True), (8, 40, 64, True), (8, 24, 192, True), (16, 16, 256, True), (16, 28, 96, True),
         (8, 32, 128, False), (16, 20, 160, False)]


def ends_in_copy(text):
    entry = text[text.rfind("ENTRY"):]
    root = re.search(r"ROOT\s+%?\S+\s*=\s*\S+\s+(\w[\w-]*)\(", entry)
    return bool(root and root.group(1) in ("copy", "transpose"))


def main():
    gens = (sys.argv[1] if len(sys.argv) > 1 else "v5e").split(",")
    same = n = 0
    errs = {}
    with tempfile.TemporaryDirectory(prefix="conv_reader_") as d:
        for gen in gens:
            for b, h, c, res in CASES:
                name = "[%d,%d,%d,%d]%s" % (b, h, h, c, " +x" if res else "")
                text = conv_norm(b, h, c, res)
                summ, comp = compile_hlo(text, TOPO[gen], d)
                if comp is None:
                    print(f"{gen} {name:24s} libtpu unavailable")
                    continue
                src = os.path.join(d, "t.hlo")
                open(src, "w").write(text)
                own = subprocess.run([TPUSIM, "compile", src, "--chip", PRESET.get(gen, gen), "--emit", "hlo"],
                                     capture_output=True, text=True).stdout
                cc, tc = ends_in_copy(comp), ends_in_copy(own)
                cyc, tcyc = summ["entry_estimated_cycles"], tpusim_step_cycles(text, gen, d)
                n += 1
                same += cc == tc
                errs.setdefault(gen, []).append(abs(tcyc / cyc - 1) * 100)
                print(f"{gen} {name:24s} copy: compiler {cc!s:5s} tpusim {tc!s:5s} {'same' if cc == tc else 'DIFFERS'}"
                      f"  cycles {tcyc} / {cyc} ({(tcyc / cyc - 1) * 100:+.1f} %)")
    print(f"tpusim decides as the compiler in {same} of {n} cases; median |error| " +
          ", ".join(f"{g} {sorted(e)[len(e) // 2]:.1f} %" for g, e in errs.items()))


if __name__ == "__main__":
    main()
