#!/usr/bin/env python3
"""sort_bundles.py: what a sort kernel costs in the TPU's own code. The XLA TPU compiler gives
no estimated_cycles for a sort (every sort and TopK of the families corpus is "unestimated":
its figure is the other kernels' sum), so its cost model cannot tell tpusim what a sort takes;
libtpu's final VLIW bundles can. This compiles sorts of shapes drawn outside the corpora with
libtpu (compile-only, no TPU: jax[tpu]), all of one generation in one jit, with
--xla_jf_dump_to, and reads each sort kernel's final bundles: their number (one bundle issues a
cycle; the small kernels are straight-line code, so that is their time but for DMA waits),
its loops, and its vector ALU operations (vsel, vcmp, vxor, ...: the network's work).

    python3 bench/fidelity/probes/sort_bundles.py probe [GENS]       # needs libtpu; writes DATA
    python3 bench/fidelity/probes/sort_bundles.py compare [TPUSIM]   # fit, then the rule against DATA
    python3 bench/fidelity/probes/sort_bundles.py read GEN DIR       # a dump kept (SORT_BUNDLES_KEEP=DIR)

DATA is bench/fidelity/probes/data/sort_bundles.json: per generation and shape, the compiled
sort instruction (operands, layouts), bundles, loops and operation counts; and the compiled
module per generation (data/sort_bundles.GEN.hlo.gz). `compare` compiles each committed module
with tpusim on the preset plus sort_lane_stage_cycles (src/compile/backend/sort_cost.c), that
field fitted on the tune split's sorts, and prints per sort kernel tpusim's body (the .op
line's min_body_cycles) against libtpu's bundles, per split (a shape is in the test split when
the first 8 hex digits of sha1(name) mod 10 < 3, the generators' rule).
Shapes: (kind, B, N, dtype) sorted along N; kinds sort (jnp.sort), argsort, kv (lax.sort of
two arrays, one key), topK (lax.top_k with k = K)."""
import glob, gzip, hashlib, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
DATA = os.path.join(HERE, "data", "sort_bundles.json")
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
SHAPES = [("sort", 8, 1024, "float32"), ("sort", 1, 256, "float32"), ("argsort", 16, 512, "int32"),
          ("kv", 4, 2000, "float32"), ("sort", 1, 64, "float32"), ("sort", 8, 128, "float32"),
          ("sort", 8, 512, "float32"), ("sort", 8, 2048, "float32"), ("sort", 32, 256, "int32"),
          ("sort", 256, 64, "float32"), ("sort", 128, 300, "int32"), ("sort", 2, 4096, "float32"),
          ("sort", 16, 1024, "bfloat16"), ("argsort", 300, 100, "float32"), ("sort", 4, 700, "int32"),
          ("kv", 1, 3000, "int32"), ("sort", 64, 32, "float32"), ("argsort", 8, 256, "float32"),
          ("sort", 24, 200, "float32"), ("sort", 3, 1500, "bfloat16"), ("sort", 64, 4096, "int32"),
          ("sort", 200, 3000, "int32"), ("sort", 8, 8192, "float32"), ("sort", 512, 1024, "float32"),
          ("top5", 16, 700, "float32"), ("top16", 64, 2048, "float32"), ("top2", 256, 16, "float32"),
          ("top64", 4, 8192, "bfloat16")]
VALU = ("vsel", "vcmp", "vxor", "vand", "vor", "vadd", "vsub", "vmul", "vshrl", "vshll", "vshra", "vmax",
        "vmin", "vnot", "vcvt", "vclamp")


def shape_name(kind, b, n, dt):
    return f"{kind}_{b}x{n}_{dt}"


def split_of(name):
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def compile_all(topo, out):
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    dev = topologies.get_topology_desc(platform="tpu", topology_name=topo).devices[0]
    args = [jax.ShapeDtypeStruct((b, n), getattr(jnp, dt), sharding=SingleDeviceSharding(dev))
            for _, b, n, dt in SHAPES]

    def f(*xs):
        outs = []
        for (kind, _, _, _), x in zip(SHAPES, xs):
            if kind == "sort":
                outs.append(jnp.sort(x, axis=-1))
            elif kind == "argsort":
                outs.append(jnp.argsort(x, axis=-1))
            elif kind == "kv":
                outs.append(jax.lax.sort((x, x * 2), num_keys=1))
            else:
                outs.append(jax.lax.top_k(x, int(kind[3:])))
        return outs
    open(out, "w").write(jax.jit(f).lower(*args).compile().as_text())


def dynamic_bundles(text):
    """Bundles a kernel issues when it runs: its static bundles, each loop's body counted once
    per trip (nested loops multiplied out). A loop runs from its `LB:` bundle to the branch
    after its `loop exit test` (scmp.ge ..., BOUND); its trips are BOUND, less the pipeline's
    fill and drain (2) for the emitter's outer loop over blocks (`iteration index, stage`), whose
    first and last iterations only fetch or write back (their compute is predicated off)."""
    rows = [(int(a, 0), ln) for a, ln in re.findall(r"^\s*(0x[0-9a-f]+|\d+)\s([^\n]*)", text, re.M)]
    if not rows:
        return 0
    loops, stack = [], []
    for i, (a, ln) in enumerate(rows):
        if " LB:" in " " + ln[:8]:
            stack.append((a, "iteration index, stage" in ln))
        m = re.search(r"scmp\.ge\.s32\.totalorder %\w+, (\d+) /\* loop exit test", ln)
        if m and stack:
            start, staged = stack.pop()
            end = next((b for b, l2 in rows[i:] if "sbr.rel" in l2), a)
            trips = int(m.group(1)) - (2 if staged else 0)
            loops.append((start, end, max(trips, 1)))
    total = rows[-1][0] + 1

    def dyn(lo, hi, inner):
        n = hi - lo + 1
        for s, e, t in inner:
            sub = [x for x in loops if s < x[0] and x[1] <= e and x != (s, e, t)]
            top = [x for x in sub if not any(y[0] < x[0] and x[1] <= y[1] and y != x for y in sub)]
            n += dyn(s, e, top) * t - (e - s + 1)
        return n
    top = [x for x in loops if not any(y[0] < x[0] and x[1] <= y[1] and y != x for y in loops)]
    return dyn(0, total - 1, top)


def kernels(d):
    """Per sort kernel of dump d: name, bundles (static, and as run), loops, VALU ops, the
    instruction's text."""
    hlo = open(os.path.join(d, "out.hlo")).read()
    res = {}
    for f in glob.glob(os.path.join(d, "*-final_bundles.txt")):
        m = re.match(r"\d+-((?:sort|custom-call)[.\d]*)-\d+-final_bundles\.txt$", os.path.basename(f))
        if not m:
            continue
        name, text = m.group(1), open(f).read()
        rows = re.findall(r"^\s*(0x[0-9a-f]+|\d+)\s", text, re.M)
        ops = re.findall(r"= (v[a-z][a-z0-9_]*)", text)
        line = re.search(r"\n\s*(?:ROOT )?%" + re.escape(name) + r" = ([^\n]*)", hlo)
        res[name] = {"static_bundles": int(rows[-1], 0) + 1 if rows else 0, "bundles": dynamic_bundles(text),
                     "loops": text.count(" LB:"), "valu": sum(1 for o in ops if o in VALU),
                     "perm": ops.count("vperm"), "instr": line.group(1).split(", metadata=")[0] if line else ""}
    return res, hlo


def probe(gens):
    for g in gens:
        for _ in range(3):  # libtpu may be busy in another process (its lock): try again
            # the dump stays where SORT_BUNDLES_KEEP names (to read again), else is removed
            d = tempfile.mkdtemp(prefix=f"sort_bundles_{g}_", dir=os.environ.get("SORT_BUNDLES_KEEP") or None)
            env = dict(os.environ, LIBTPU_INIT_ARGS="--xla_jf_dump_to=" + d)
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "one", TOPO[g], os.path.join(d, "out.hlo")],
                               env=env, capture_output=True, text=True)
            if r.returncode == 0:
                ks, hlo = kernels(d)
            if not os.environ.get("SORT_BUNDLES_KEEP"):
                shutil.rmtree(d, ignore_errors=True)
            if r.returncode == 0:
                break
            time.sleep(2)
        else:
            sys.exit(f"{g}: libtpu compile failed: {r.stderr[-500:]}")
        store(g, ks, hlo)


def store(g, ks, hlo):
    """Generation g's sort kernels (kernels()) into DATA, each under the shape its key operand
    comes from (the entry's parameters are in SHAPES order), and its compiled module."""
    params = dict(re.findall(r"%(\S+) = \S+ parameter\((\d+)\)", hlo[hlo.rfind("\nENTRY"):]))
    rows = {}
    for name, k in ks.items():
        src = re.search(r"(?:sort|custom-call)\(%([^,)]+)", k["instr"])
        cur, seen = src.group(1) if src else "", 0  # back through copies and fusions to a parameter
        while cur not in params and seen < 8:
            m = re.search(r"\n\s*(?:ROOT )?%" + re.escape(cur) + r" = [^\n]*? [\w\-]+\(%([\w.\-]+)", hlo)
            cur, seen = (m.group(1) if m else ""), seen + 1
        if cur in params:
            rows[shape_name(*SHAPES[int(params[cur])])] = dict(k, name=name)
    data = json.load(open(DATA)) if os.path.exists(DATA) else {"kernels": {}}
    data["shapes"] = {shape_name(*s): {"kind": s[0], "b": s[1], "n": s[2], "dtype": s[3],
                                       "split": split_of(shape_name(*s))} for s in SHAPES}
    data["kernels"][g] = rows
    json.dump(data, open(DATA, "w"), indent=1, sort_keys=True)
    with gzip.open(os.path.join(HERE, "data", f"sort_bundles.{g}.hlo.gz"), "wt") as z:
        z.write(hlo)
    print(f"{g}: {len(rows)} sort kernels of {len(SHAPES)} shapes", file=sys.stderr)


def bodies(tpusim, g, lane_stage):
    """tpusim's body (min_body_cycles) of each sort of generation g's committed module, on the
    preset with sort_lane_stage_cycles set to lane_stage (no preset carries it)."""
    chip = json.load(open(os.path.join(ROOT, "chips", g + ".json")))
    chip["sort_lane_stage_cycles"] = {"value": lane_stage, "source": "XLA", "status": "derived", "note": "sort_bundles.py"}
    with tempfile.TemporaryDirectory(prefix="sort_bundles_") as d:
        cf, hf = os.path.join(d, g + ".json"), os.path.join(d, "m.hlo")
        json.dump(chip, open(cf, "w"))
        with gzip.open(os.path.join(HERE, "data", f"sort_bundles.{g}.hlo.gz"), "rt") as z:
            open(hf, "w").write(z.read())
        # v4 as compare.py runs it: one TensorCore (v4:core), the device XLA compiles for there
        r = subprocess.run([tpusim, "compile", hf, "--chip", cf + (":core" if g == "v4" else "")],
                           capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{g}: tpusim compile failed: {r.stderr.strip()}")
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'\.op name="([^"]+)"[^\n]*? min_body_cycles=([0-9.e+]+)', r.stdout)}


def compare(tpusim):
    """Per generation: sort_lane_stage_cycles fitted on the tune shapes' sorts along the lanes
    (the median of libtpu's bundles less tpusim's network operations, per stage that waits),
    then tpusim's body against libtpu's bundles per shape, test split first."""
    data = json.load(open(DATA))
    rows_out, errs, fitted = [], {}, {}
    for g, rows in sorted(data["kernels"].items()):
        b0, b1 = bodies(tpusim, g, 1e-9), bodies(tpusim, g, 1.0)
        per = []
        for shape, k in rows.items():
            n = k["name"]
            waits = b1.get(n, 0) - b0.get(n, 0)
            if data["shapes"][shape]["split"] == "tune" and n.startswith("sort") and waits > 0.5:
                per.append((k["bundles"] - b0[n]) / waits)
        lane = round(statistics.median(per), 1) if per else 0.0
        fitted[g] = (lane, len(per))
        body = bodies(tpusim, g, lane) if lane > 0 else b0
        for shape, k in rows.items():
            if not k["name"].startswith("sort"):
                continue  # TopK custom calls: not this rule's
            sp = data["shapes"][shape]["split"]
            got = body.get(k["name"], 0.0)
            e = got / k["bundles"] - 1 if k["bundles"] else float("nan")
            errs.setdefault((sp, g), []).append(abs(e))
            rows_out.append((sp != "test", g, shape, sp, k["bundles"], got, e, k["loops"]))
    print("%-4s %-26s %-5s %9s %9s %8s %s" % ("gen", "shape", "split", "libtpu", "tpusim", "error", "loops"))
    for _, g, shape, sp, b, got, e, lp in sorted(rows_out):
        print("%-4s %-26s %-5s %9d %9.0f %+7.1f%% %d" % (g, shape, sp, b, got, 100 * e, lp))
    for g, (lane, n) in sorted(fitted.items()):
        print(f"{g}: sort_lane_stage_cycles {lane} (median of {n} tune sorts)")
    for (sp, g), e in sorted(errs.items(), key=lambda x: (x[0][0] != "test", x[0][1])):
        e.sort()
        print("%-5s %-4s n=%2d median |error| %5.1f %%  max %5.1f %%" % (sp, g, len(e), 100 * statistics.median(e), 100 * e[-1]))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["one"]:
        compile_all(a[1], a[2])
    elif a[:1] == ["read"]:  # read GEN DIR: a dump kept by SORT_BUNDLES_KEEP
        store(a[1], *kernels(a[2]))
    elif a[:1] == ["probe"]:
        probe((a[1] if len(a) > 1 else "v4,v5e,v5p,v6e").split(","))
    elif a[:1] == ["compare"]:
        compare(a[1] if len(a) > 1 else os.path.join(ROOT, "build", "tpusim"))
    else:
        sys.exit(__doc__)
