#!/usr/bin/env python3
"""scatter_form.py TOPOLOGY D M DTYPE LO HI: libtpu probes of the form of the XLA TPU compiler's
scatter kernel (src/compile/backend/scatter_form.c). Compiles scatter-adds of M rows of
DTYPE[M,D] into DTYPE[N,D] with /work/shared/tools/tpu_compile.py for one device of TOPOLOGY
and reads the VMEM its scatter fusion reserves (used_scoped_memory_configs): staged, the whole
operand (32-bit elements, N padded to the sublanes) beside a chunk of min(M, 1024) update rows;
row by row, a fixed 272 rows. Bisects N between LO (staged) and HI (row by row) and prints one
line per compile, then the limit. The compiler gives scatter fusions no estimated_cycles: the
form is what the probe reads, not a time.

Session 12 (f32, M = 512 unless said; rows of 4 x D bytes):
  v5e D=768: N=1000 4,644,864 B (1512 rows); 4,295 staged (14,770,176 B), 4,302 row by row
             (835,584 B = 272 rows); M=1024: 4,395 staged with 408-row chunks, 4,400 rows
  v5e D=128: 30,541 staged (15,900,672 B), 30,546 row by row
  v5e D=256: 14,939 staged (15,826,944 B), 14,947 row by row
  v5e D=2048: N=512 8,388,608 B (512 + 512 rows); N=1424 13,172,736 B (chunk shrunk to 184)
  v4  D=768: 4,294 staged, 4,301 row by row
  v5p D=768: 2,750 and 3,625 staged (10,027,008 B, 12,730,368 B); 4,500 row by row
  v6e D=768: 9,619 staged (31,137,792 B), 9,626 row by row
  v6e D=128: 62,867 staged (32,452,608 B), 62,875 row by row
The room left beside operand and chunk, less a second chunk, is 1/40 of the scoped VMEM
(v5e 410 KiB: D=256 416, D=768 424 KiB left; v6e 819 KiB: D=128 820, D=768 824 KiB;
v5e D=128 600 KiB the exception)
The families corpus agrees: scatter_add_1000x128_m4096_bf16 1,036,288 B (2024 rows of 512 B:
the bf16 operand widened), scatter_set_197x1024_m4096_f32 5,013,504 B (200 + 1024 rows),
scatter_add_50257x1024_m16_bf16 557,056 B (272 rows); on v6e (32 MiB) the 25.7 MB operand of
scatter_add_50257x128_m4096_bf16 is staged (26,259,456 B = 50,264 + 1024 rows)."""
import re, subprocess, sys, tempfile, os

TOOL = "/work/shared/tools/tpu_compile.py"


def hlo(n, d, m, dt):
    return (f"HloModule probe\n\nregion {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
            f"  ROOT r = {dt}[] add(a, b)\n}}\n\nENTRY e {{\n  t = {dt}[{n},{d}] parameter(0)\n"
            f"  i = s32[{m},1] parameter(1)\n  u = {dt}[{m},{d}] parameter(2)\n"
            f"  ROOT s = {dt}[{n},{d}] scatter(t, i, u), update_window_dims={{1}}, inserted_window_dims={{0}},"
            f" scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=region\n}}\n")


def scoped(n, d, m, dt, topo):
    """The VMEM bytes the scatter fusion reserves, or None when the compile fails."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "p.hlo"), os.path.join(tmp, "o.hlo")
        open(src, "w").write(hlo(n, d, m, dt))
        if subprocess.run([sys.executable, TOOL, src, topo, out], capture_output=True).returncode:
            return None
        text = open(out).read()
    for line in text[text.rfind("\nENTRY"):].splitlines():
        if re.search(r"%scatter[\w.]* = ", line):
            s = re.search(r'used_scoped_memory_configs":\[\{"memory_space":"1","offset":"0","size":"(\d+)"', line)
            return int(s.group(1)) if s else 0
    return None


def main():
    topo, d, m, dt, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    row = d * 4
    while hi - lo > 8:
        mid = (lo + hi) // 2
        s = scoped(mid, d, m, dt, topo)
        if s is None:
            print(mid, "compile failed; stopping")
            break
        staged = s > 2 * 272 * row  # more than the row-by-row form's 272 rows
        print(mid, s, "staged" if staged else "row by row", flush=True)
        lo, hi = (mid, hi) if staged else (lo, mid)
    print("limit", topo, "D", d, "M", m, dt, "last staged", lo, "first row by row", hi)


if __name__ == "__main__":
    main()
