#!/usr/bin/env python3
"""pool_layout.py [GEN]: the layout a pooling reduce-window runs in and what it reads, by the
XLA TPU compiler (libtpu, compile-only) and by tpusim's own compilation, on pools outside the
bench/fidelity corpora (session 16, rw; window_layout.c and window_widen.c cite them).

Per case: the window's layout (the reduce-window's, or the root of the kOutput fusion that
holds it), whether a parameter copy runs first, and whether the window reads the bf16
parameter itself (an average pool over bf16 summed in f32: the widening convert folded into
the window). Prints one row per case and the number of cases where tpusim decides as the
compiler does. Default GEN v5e."""
import os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, TPUSIM, compile_hlo  # noqa: E402

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
MAX = "mx {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT m = %s[] maximum(a, b)\n}\n"


def dims(v):
    return ",".join(str(x) for x in v)


def out_dims(x, k, s):
    return [x[0]] + [(n - k) // s + 1 for n in x[1:-1]] + [x[-1]]


def max_pool(ty, x, k, s):
    """Max pool of a row-major parameter (the compiler lays the parameter out itself)."""
    o, w = out_dims(x, k, s), "x".join(["1"] + [str(k)] * (len(x) - 2) + ["1"])
    st = "x".join(["1"] + [str(s)] * (len(x) - 2) + ["1"])
    return ("HloModule m\n" + MAX % (ty, ty, ty) + "ENTRY e {\n x = %s[%s] parameter(0)\n z = %s[] constant(-inf)\n"
            " ROOT r = %s[%s] reduce-window(x, z), window={size=%s stride=%s}, to_apply=mx\n}\n"
            % (ty, dims(x), ty, ty, dims(o), w, st))


def avg_pool_bf16(x, k, s, also=False):
    """A bf16 average pool summed in f32 (jnp's form); also: the f32 value returned too."""
    o, w = out_dims(x, k, s), "x".join(["1"] + [str(k)] * (len(x) - 2) + ["1"])
    st = "x".join(["1"] + [str(s)] * (len(x) - 2) + ["1"])
    root = (" ROOT t = (f32[%s], f32[%s]) tuple(r, xf)\n" % (dims(o), dims(x)) if also else
            " k = f32[] constant(9)\n kb = f32[%s] broadcast(k), dimensions={}\n d = f32[%s] divide(r, kb)\n"
            " ROOT y = bf16[%s] convert(d)\n" % (dims(o), dims(o), dims(o)))
    return ("HloModule m\n" + ADD + "ENTRY e {\n x = bf16[%s] parameter(0)\n xf = f32[%s] convert(x)\n"
            " z = f32[] constant(0)\n r = f32[%s] reduce-window(xf, z), window={size=%s stride=%s}, to_apply=add\n%s}\n"
            % (dims(x), dims(x), dims(o), w, st, root))


CASES = [("max f32 [32,33,33,128] 2x2/2", max_pool("f32", [32, 33, 33, 128], 2, 2)),
         ("max f32 [32,33,33,128] 2x2/1", max_pool("f32", [32, 33, 33, 128], 2, 1)),
         ("max f32 [32,33,33,128] 3x3/2", max_pool("f32", [32, 33, 33, 128], 3, 2)),
         ("max f32 [32,33,33,128] 3x3/1", max_pool("f32", [32, 33, 33, 128], 3, 1)),
         ("max bf16 [32,33,33,128] 2x2/2", max_pool("bf16", [32, 33, 33, 128], 2, 2)),
         ("max bf16 [32,33,33,128] 5x5/1", max_pool("bf16", [32, 33, 33, 128], 5, 1)),
         ("avg bf16 [16,20,20,8] 3x3/1", avg_pool_bf16([16, 20, 20, 8], 3, 1)),
         ("avg bf16 [1,7,7,96] 3x3/2", avg_pool_bf16([1, 7, 7, 96], 3, 2)),
         ("avg bf16 [16,2048,128] 4/1, f32 also out", avg_pool_bf16([16, 2048, 128], 4, 1, also=True))]


def decisions(text):
    """(window layout, parameter copy before it, window reads bf16) of a printed program."""
    entry = text[text.rfind("ENTRY"):]
    lay = reads_bf16 = None
    for m in re.finditer(r"=\s*(\w+)\[[\d,]*\]\{([\d,]*)[^}]*\}\s+(reduce-window|fusion)\(([^)]*)\)(.*)", entry):
        ty, layout, op, args, rest = m.groups()
        if op == "fusion":
            called = re.search(r"calls=%?([\w.\-]+)", rest)
            body = re.search(r"\n%?" + re.escape(called.group(1)) + r"[ (].*?\n}", text, re.S) if called else None
            if not body or "reduce-window(" not in body.group(0):
                continue
            w = re.search(r"=\s*\w+\[[\d,]*\]\{([\d,]*)[^}]*\}\s+reduce-window\(", body.group(0))
            layout = w.group(1)
            reads_bf16 = "bf16" in body.group(0).split("reduce-window(")[0].split("parameter(")[0] or \
                re.search(r"bf16\[[\d,]*\]\{[^}]*\} parameter\(", body.group(0)) is not None
        else:
            arg = args.split(",")[0].strip().lstrip("%")
            src = re.search(r"\n\s*%?" + re.escape(arg) + r" = (\w+)\[", entry)
            reads_bf16 = bool(src and src.group(1) == "bf16")
        lay = layout
    copy = re.search(r"\bcopy(\.\w+)?\s*=\s*\S+\s+copy\(%?x", entry) is not None or \
        re.search(r"copy\(%?x(\.1)?\)", entry) is not None
    return lay, copy, reads_bf16


def main():
    gen = sys.argv[1] if len(sys.argv) > 1 else "v5e"
    same = n = 0
    with tempfile.TemporaryDirectory(prefix="pool_layout_") as d:
        for name, text in CASES:
            _, comp = compile_hlo(text, TOPO[gen], d)
            if comp is None:
                print(f"{name:44s} libtpu unavailable")
                continue
            src = os.path.join(d, "t.hlo")
            open(src, "w").write(text)
            own = subprocess.run([TPUSIM, "compile", src, "--chip", gen, "--emit", "hlo"], capture_output=True, text=True).stdout
            c, t = decisions(comp), decisions(own)
            n += 1
            same += c == t
            print(f"{name:44s} compiler {str(c):28s} tpusim {str(t):28s} {'same' if c == t else 'DIFFERS'}")
    print(f"{gen}: tpusim decides as the compiler in {same} of {n} cases (layout, parameter copy, reads bf16)")


if __name__ == "__main__":
    main()
