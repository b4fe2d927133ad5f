#!/usr/bin/env python3
"""mutate.py: mutation testing. Applies small deliberate bugs to tpusim, one at a time, each
to a scratch copy of the tree, builds it (release), runs the suite (ctest) and reports which
the suite catches (docs/testing.md, "Mutation testing").

    nice -n 10 scripts/mutate.py [--only NAME,...] [--jobs N] [--work DIR] [--keep] [--list]
                                 [--markdown OUT.md] [--all-tests]

Every mutation is an exact search/replace on one source file: the search text must occur in
the file exactly once, or the script stops with an error naming the mutation (a mutation
that no longer applies is fixed here, never skipped). The scratch copy holds the tracked
files of the repository (git ls-files) in --work (default: a new directory under /tmp); one
build directory serves every mutation (incremental builds). A baseline run first checks that
the unmutated copy passes. A mutation is caught when the build succeeds and some test fails
(by default ctest stops at the first failure: --all-tests runs them all to name every test
that catches it); a mutation that breaks the build is reported as such (not caught: fix
the mutation). The two slowest tests (SLOW) run only when the others pass. Exit status: 0 when every mutation is caught, 1 otherwise, 2 on a usage or
setup error."""
import argparse, os, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests run after the others, and only when those pass (they take minutes each)
SLOW = "^(python_tests|cli_plan)$"

# (name, unit, file, search, replace, what the bug is)
MUTATIONS = [
    # ---- values ----
    ("ref-subtract", "values", "src/ref/elementwise.c",
     "case TPU_OP_SUBTRACT: for (int i = 0; i < n; i++) a[i] = a[i] - b[i]; break;",
     "case TPU_OP_SUBTRACT: for (int i = 0; i < n; i++) a[i] = b[i] - a[i]; break;",
     "the reference interpreter's floating-point subtract computes b - a"),
    ("mxu-accumulate", "values", "src/chip/mxu_kernel.c",
     "__m256 v = first ? p : _mm256_add_ps(_mm256_loadu_ps(o), p);",
     "__m256 v = first ? p : _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o), _mm256_set1_ps(0.5f)), p);",
     "the MXU halves the sum of the earlier K tiles when it adds the next tile's partial sums"),
    ("ref-complex-dot", "values", "src/ref/dot.c",
     "c[2 * j + 1] += (T)(ar * bi + ai * br);",
     "c[2 * j + 1] += (T)(ar * bi - ai * br);",
     "the reference interpreter's complex dot gets the imaginary part's sign of one product wrong"),
    # ---- timing ----
    ("eup-tanh-3x", "timing", "src/compile/backend/tile.c",
     "case TPU_OP_EXP: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH:\n      *vpu = 0; *eup = 1; break;",
     "case TPU_OP_EXP: case TPU_OP_SQRT: case TPU_OP_RSQRT:\n      *vpu = 0; *eup = 1; break;\n"
     "    case TPU_OP_TANH: *vpu = 2; *eup = 2; break;",
     "tanh takes two EUP pushes and two vector ops per register (issue 38's planted bug)"),
    ("eup-rate", "timing", "src/chip/timing.c",
     "double r = in->opc == TPU_ISA_VPU ? t->chip->vector_ops_per_cycle : t->chip->eup_pushes_per_cycle;",
     "double r = in->opc == TPU_ISA_VPU ? t->chip->vector_ops_per_cycle : 0.8 * t->chip->eup_pushes_per_cycle;",
     "the EUP pushes 20 % fewer registers per cycle"),
    ("eup-bf16-width", "timing", "src/compile/backend/tile.c",
     "return b > 0 && b < 4 ? vr * (int64_t)(4 / b) : vr;",
     "return b > 0 && b < 2 ? vr * (int64_t)(4 / b) : vr;",
     "a 16-bit value is pushed through the EUP without widening to 32-bit registers"),
    ("vpu-rate", "timing", "src/chip/timing.c",
     "double r = in->opc == TPU_ISA_VPU ? t->chip->vector_ops_per_cycle : t->chip->eup_pushes_per_cycle;",
     "double r = in->opc == TPU_ISA_VPU ? 1.25 * t->chip->vector_ops_per_cycle : t->chip->eup_pushes_per_cycle;",
     "the VPU issues 25 % more operations per cycle"),
    ("vpu-log-op", "timing", "src/compile/backend/tile.c",
     "case TPU_OP_LOG: *vpu = 1; *eup = 1; break;",
     "case TPU_OP_LOG: *vpu = 2; *eup = 1; break;",
     "log takes two vector ops per register instead of one"),
    ("xlu-rate", "timing", "src/chip/timing.c",
     "c = ceil_div(in->vregs * in->ops, cores);",
     "c = ceil_div(2 * in->vregs * in->ops, cores);",
     "the cross-lane unit takes two cycles per register"),
    ("xlu-reduce", "timing", "src/compile/backend/tile.c",
     "if (minor) c->xlu += ivr * n;",
     "if (minor) c->xlu += ivr * n * 5 / 4;",
     "a reduction over the lanes pushes 25 % more registers through the cross-lane unit"),
    ("mxu-stream", "timing", "src/chip/timing.c",
     "int64_t cyc = (mc.weight_load + mc.stream) * (in->passes > 0 ? in->passes : 1);",
     "int64_t cyc = (mc.weight_load + mc.stream * 6 / 5) * (in->passes > 0 ? in->passes : 1);",
     "the MXU streams its rows 20 % slower"),
    ("hbm-bandwidth", "timing", "src/chip/timing.c",
     "t.bpc = tpu_chip_hbm_stream_bw(chip) / chip->clock_hz;",
     "t.bpc = 0.85 * tpu_chip_hbm_stream_bw(chip) / chip->clock_hz;",
     "HBM streams at 85 % of its rate"),
    ("dma-latency", "timing", "src/chip/timing.c",
     "t.lat = (int64_t)llround(lat_s * chip->clock_hz);",
     "t.lat = (int64_t)llround(2 * lat_s * chip->clock_hz);",
     "an HBM read waits twice the HBM latency"),
    ("matmul-weight-stream", "timing", "src/chip/timing.c",
     "b /= t->chip->matmul_stream_efficiency;",
     "b /= 0.8 * t->chip->matmul_stream_efficiency;",
     "a matmul streams its weight from HBM 20 % slower"),
    ("kernel-start", "timing", "src/chip/timing.c",
     "t.kov = chip->kernel_overhead_s > 0 ? (int64_t)llround(chip->kernel_overhead_s * chip->clock_hz) : 0;",
     "t.kov = chip->kernel_overhead_s > 0 ? (int64_t)llround(1.5 * chip->kernel_overhead_s * chip->clock_hz) : 0;",
     "each kernel's fixed start cost is 1.5 times the preset's"),
    ("matmul-start", "timing", "src/chip/timing.c",
     "t.mov = chip->matmul_overhead_s > 0 ? (int64_t)llround(chip->matmul_overhead_s * chip->clock_hz) : 0;",
     "t.mov = chip->matmul_overhead_s > 0 ? (int64_t)llround(1.5 * chip->matmul_overhead_s * chip->clock_hz) : 0;",
     "each matmul kernel's extra start cost is 1.5 times the preset's"),
    ("mxu-weight-load", "timing", "src/chip/timing.c",
     "mc.weight_load = W + (F - 1) * (W > T ? W - T : 0);",
     "mc.weight_load = 2 * W + (F - 1) * (2 * W > T ? 2 * W - T : 0);",
     "the MXU loads a weight tile in twice the preset's cycles"),
    ("result-pass", "timing", "src/chip/timing.c",
     "const double pass = o && in->opc == TPU_ISA_DMA_OUT && o->out_scale > 1 ? o->out_scale : 1.0;",
     "const double pass = o && in->opc == TPU_ISA_DMA_OUT && o->out_scale > 1 ? 1.25 * o->out_scale : 1.0;",
     "a matmul's 16-bit result pass costs 25 % more"),
    ("xlu-transpose", "timing", "src/compile/backend/tile.c",
     "if (tpu__moves_minor(be->chip, in)) c->xlu += vr;",
     "if (tpu__moves_minor(be->chip, in)) c->xlu += 2 * vr;",
     "a transpose moving the minor dimension pushes each register twice through the cross-lane unit"),
    ("vpu-reduce", "timing", "src/compile/backend/tile.c",
     "c->vpu += ivr * n * ops;",
     "c->vpu += 2 * ivr * n * ops;",
     "a reduction takes two vector ops per input register and reducer op"),
    ("vpu-divide", "timing", "src/compile/backend/tile.c",
     "case TPU_OP_DIVIDE: *vpu = f ? 2 : 20; *eup = f ? 1 : 0; break;",
     "case TPU_OP_DIVIDE: *vpu = f ? 4 : 20; *eup = f ? 1 : 0; break;",
     "a floating-point divide takes four vector ops per register instead of two"),
    ("mxu-f32-passes", "timing", "src/compile/backend/tile.c",
     "return p == TPU_PREC_HIGHEST ? 6 : p == TPU_PREC_HIGH ? 3 : 1;",
     "return p == TPU_PREC_HIGHEST ? 4 : p == TPU_PREC_HIGH ? 3 : 1;",
     "an f32 matmul at HIGHEST precision takes 4 bf16 passes instead of 6"),
    ("int8-rate", "timing", "src/chip/timing.c",
     "cyc = (int64_t)ceil((double)cyc / chip->int8_rate);",
     "cyc = (int64_t)ceil((double)cyc / (1.5 * chip->int8_rate));",
     "int8 matmuls run 1.5 times the preset's int8 rate"),
    ("rng-cost", "timing", "src/compile/backend/tile.c",
     "c->vpu += vr * 40;",
     "c->vpu += vr * 50;",
     "the random bit generator takes 50 vector ops per register instead of 40"),
    ("sort-cost", "timing", "src/compile/backend/tile.c",
     "c->vpu += ivr * stages * 3;",
     "c->vpu += ivr * stages * 4;",
     "each stage of a sort takes 4 vector ops per register instead of 3"),
    ("scatter-cost", "timing", "src/compile/backend/tile.c",
     "c->vpu += tpu__vregs(be, us) * (1 + comp_ops(in->to_apply));",
     "c->vpu += tpu__vregs(be, us) * (2 + comp_ops(in->to_apply));",
     "a scatter takes one more vector op per update register"),
    # ---- collectives ----
    ("ici-all-reduce-bytes", "collectives", "src/pod/ici.c",
     "        h = 2 * group_gather(&x, &g, s, slice_base, op->operand_bytes / sd);\n"
     "        group_gather(&x, &g, s, slice_base, op->operand_bytes / sd);\n",
     "        h = 2 * group_gather(&x, &g, s, slice_base, op->operand_bytes / sd);\n",
     "an all-reduce loads the links with the all-gather's bytes only (the reduce-scatter's left out)"),
    ("all-reduce-bytes-sent", "collectives", "src/pod/cost.c",
     ": base == TPU_OP_ALL_REDUCE ? 2 * f * vin",
     ": base == TPU_OP_ALL_REDUCE ? f * vin",
     "an all-reduce is counted as sending (n-1)/n of its operand, not 2(n-1)/n"),
    ("ici-link-bw", "collectives", "src/pod/topology.c",
     "t->link_bw = chip->ici_bw_per_link;",
     "t->link_bw = 1.25 * chip->ici_bw_per_link;",
     "ICI links carry 25 % more than the preset's bandwidth"),
    ("dcn-all-reduce-bytes", "collectives", "src/pod/cost.c",
     "case TPU_ICI_ALL_REDUCE: bytes = 2 * f * V / (double)m; break;",
     "case TPU_ICI_ALL_REDUCE: bytes = f * V / (double)m; break;",
     "an all-reduce across slices sends half its bytes over DCN"),
    ("ici-all-gather-bytes", "collectives", "src/pod/ici.c",
     "case TPU_ICI_ALL_GATHER: h = group_gather(&x, &g, s, slice_base, op->operand_bytes); break;",
     "case TPU_ICI_ALL_GATHER: h = group_gather(&x, &g, s, slice_base, 0.8 * op->operand_bytes); break;",
     "an all-gather loads the links with 80 % of its shards' bytes"),
    ("ici-permute-bytes", "collectives", "src/pod/ici.c",
     "int64_t h = route(&x, u, v, op->operand_bytes);",
     "int64_t h = route(&x, u, v, op->operand_bytes / 2);",
     "a collective-permute sends half its operand"),
    ("ici-hop-latency", "collectives", "src/pod/ici.c",
     "r->latency_seconds = (double)hops * t->hop_s;",
     "r->latency_seconds = (double)hops * 2 * t->hop_s;",
     "each ICI hop waits twice the preset's latency"),
    ("ici-reduce-scatter-bytes", "collectives", "src/pod/ici.c",
     "op->result_bytes > 0 ? op->result_bytes : op->operand_bytes / sd);",
     "op->result_bytes > 0 ? op->result_bytes : 0.8 * op->operand_bytes / sd);",
     "a reduce-scatter loads the links with 80 % of its bytes (the pod's collectives give the "
     "operand, not result_bytes: the branch every program takes)"),
    # ---- the SPMD partitioner ----
    ("spmd-dot-choice", "partitioner", "src/compile/spmd/spmd_dot.c",
     "p.cost < best.cost ||",
     "p.cost > best.cost ||",
     "the partitioner keeps the costlier of two dot plans"),
    ("spmd-elementwise-choice", "partitioner", "src/compile/spmd/spmd.c",
     "if (n > bn && tpu__spmd_fits(s, &in->shape, &s->sh[o->id])) bn = n, best = s->sh[o->id];",
     "if ((bn < 0 || n < bn) && tpu__spmd_fits(s, &in->shape, &s->sh[o->id])) bn = n, best = s->sh[o->id];",
     "an elementwise op takes the sharding of its least split operand, not its most split one"),
    # ---- the PJRT plugin ----
    ("pjrt-shard-0", "plugin", "src/pjrt/exec.c",
     "oa->starts + d * oa->rank",
     "oa->starts + 0 * oa->rank",
     "every device's buffer of a sharded result gets shard 0's block"),
    ("pjrt-argument-shard-0", "plugin", "src/pjrt/exec.c",
     "void *block = a->argument_lists[d][i]->data;",
     "void *block = a->argument_lists[0][i]->data;",
     "every device's block of a sharded argument is taken from device 0's buffer"),
    ("pjrt-stacked-row-0", "plugin", "src/pjrt/exec.c",
     "if (stacked) memcpy(dst, (const char *)out.data + (size_t)d * lbytes, lbytes);",
     "if (stacked) memcpy(dst, (const char *)out.data + (size_t)0 * lbytes, lbytes);",
     "every device's buffer of a result without a sharding gets device 0's row"),
]


def run(cmd, cwd, log, timeout=None):
    with open(log, "ab") as fh:
        fh.write(("$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        p = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode


def failed_tests(build, log_start, log):
    """The tests ctest reported failing in the log written since log_start."""
    with open(log, "rb") as fh:
        fh.seek(log_start)
        text = fh.read().decode(errors="replace")
    names = []
    for line in text.splitlines():
        # "  12 - test_rules (Failed)" in ctest's summary
        line = line.strip()
        if " - " in line and line.endswith(")") and line.split(" - ", 1)[0].strip().isdigit():
            names.append(line.split(" - ", 1)[1].rsplit(" (", 1)[0])
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutation names")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--work", default="", help="scratch directory (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--markdown", default="", help="also write the result table as Markdown")
    ap.add_argument("--all-tests", action="store_true", help="run every test for each mutation")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    a = ap.parse_args()
    names = [m[0] for m in MUTATIONS]
    if len(set(names)) != len(names):
        sys.exit("mutate.py: duplicate mutation names")
    if a.list:
        for name, unit, f, _, _, what in MUTATIONS:
            print(f"{name:24s} {unit:12s} {f:28s} {what}")
        return 0
    only = [w for w in a.only.split(",") if w]
    for w in only:
        if w not in names:
            print(f"mutate.py: no mutation named {w}", file=sys.stderr)
            return 2
    todo = [m for m in MUTATIONS if not only or m[0] in only]
    # Every mutation must apply to the tree as it is: exactly one occurrence of its search text.
    for name, _, f, search, replace, _ in todo:
        text = open(os.path.join(ROOT, f)).read()
        n = text.count(search)
        if n != 1:
            print(f"mutate.py: mutation {name}: the search text occurs {n} times in {f} (must be once)",
                  file=sys.stderr)
            return 2
    work = a.work or tempfile.mkdtemp(prefix="tpusim-mutate-")
    tree = os.path.join(work, "tree")
    build = os.path.join(tree, "build")
    log = os.path.join(work, "log.txt")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if not rel:
            continue
        src, dst = os.path.join(ROOT, rel), os.path.join(tree, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
            shutil.copy2(src, dst)
    print(f"scratch tree: {tree} (log: {log})", flush=True)
    if run(["cmake", "-S", tree, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], tree, log) != 0:
        print("mutate.py: cmake failed (see the log)", file=sys.stderr)
        return 2
    ctest = ["ctest", "--test-dir", build, "-j", str(a.jobs), "--output-on-failure"]
    if not a.all_tests:
        ctest.append("--stop-on-failure")
    if run(["cmake", "--build", build, "-j", str(a.jobs)], tree, log) != 0:
        print("mutate.py: the unmutated tree does not build (see the log)", file=sys.stderr)
        return 2
    if not a.no_baseline:
        t0 = time.time()
        start = os.path.getsize(log)
        if run([c for c in ctest if c != "--stop-on-failure"], tree, log) != 0:
            print("mutate.py: the unmutated tree fails: " + ", ".join(failed_tests(build, start, log)), file=sys.stderr)
            return 2
        print(f"baseline: every test passes ({time.time() - t0:.0f} s)", flush=True)
    rows = []
    for name, unit, f, search, replace, what in todo:
        path = os.path.join(tree, f)
        orig = open(path).read()
        t0 = time.time()
        try:
            open(path, "w").write(orig.replace(search, replace))
            start = os.path.getsize(log)
            with open(log, "a") as fh:
                fh.write(f"\n==== mutation {name}: {what}\n")
            if run(["cmake", "--build", build, "-j", str(a.jobs)], tree, log) != 0:
                verdict, by = "BUILD FAILED", []
            else:
                # the quick tests first; the slow ones only when those pass
                by, rc = [], 0
                for part in ([ctest] if a.all_tests else [ctest + ["-E", SLOW], ctest + ["-R", SLOW]]):
                    start = os.path.getsize(log)
                    rc = run(part, tree, log)
                    by = failed_tests(build, start, log)
                    if rc != 0:
                        break
                verdict = "caught" if rc != 0 else "MISSED"
        finally:
            open(path, "w").write(orig)
        rows.append((name, unit, f, what, verdict, by))
        print(f"{name:24s} {verdict:12s} {time.time() - t0:5.0f} s  {', '.join(by)}", flush=True)
    # the tree back as it was (the next user builds the unmutated sources)
    run(["cmake", "--build", build, "-j", str(a.jobs)], tree, log)
    caught = sum(1 for r in rows if r[4] == "caught")
    print(f"\n{caught} of {len(rows)} mutations caught")
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write("| mutation | unit | file | the bug | result | caught by |\n|---|---|---|---|---|---|\n")
            for name, unit, f, what, verdict, by in rows:
                fh.write(f"| {name} | {unit} | {f} | {what} | {verdict} | {', '.join(by)} |\n")
    if not a.keep and not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
