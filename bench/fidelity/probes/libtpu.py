"""One HLO text compiled by the XLA TPU compiler (libtpu, compile-only) through
/work/shared/tools/tpu_compile.py, for the probe scripts beside this file."""
import json, os, re, subprocess, sys, tempfile, time

TOOL = "/work/shared/tools/tpu_compile.py"
HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
# one device of each generation, as bench/fidelity compiles; a v4 compile-only device is one
# TensorCore, which tpusim runs as v4:core
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core"}


def compile_hlo(text, topo, d):
    """Compiles `text` for one device of topology `topo` in folder d; returns the tool's summary
    (its last JSON line: entry_estimated_cycles, ...) and the compiled program's text, or
    (None, None) when six starts fail (libtpu is shared: another process may hold it)."""
    src, out = os.path.join(d, "p.hlo"), os.path.join(d, "p.out.hlo")
    open(src, "w").write(text)
    for _ in range(6):
        p = subprocess.run([sys.executable, TOOL, src, topo, out], capture_output=True, text=True)
        if p.stdout.strip():
            return json.loads(p.stdout.strip().splitlines()[-1]), open(out).read()
        time.sleep(2)  # libtpu's lockfile: one compile at a time on the machine
    return None, None


def compile_retry(text, topo, d, tries=40):
    """compile_hlo, retried every 5 s up to `tries` times while other compiles on the machine
    hold libtpu's lockfile; (None, None) when none succeeds."""
    for _ in range(tries):
        r = compile_hlo(text, topo, d)
        if r[1]:
            return r
        time.sleep(5)
    return None, None


def entry_ops(compiled):
    """The compiled program's top-level entry ops as [name, shape, opcode, estimated_cycles or
    None], in program order."""
    ops = []
    for line in compiled[compiled.rfind("\nENTRY"):].splitlines()[1:]:
        m = re.match(r'\s*(?:ROOT )?%(\S+) = (\S+) (\S+?)\(', line)
        if m:
            e = re.search(r'"estimated_cycles":"(\d+)"', line)
            ops.append([m.group(1), m.group(2), m.group(3), int(e.group(1)) if e else None])
    return ops


def tpusim_cycles(tpusim, text, chip, d):
    """tpusim's step cycles for `text` on `chip` (`tpusim run --mode timing`), or None when the
    run fails."""
    src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    p = subprocess.run([tpusim, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                       capture_output=True, text=True)
    return json.load(open(rep))["step"]["cycles"] if p.returncode == 0 else None


def draw_transpose(rng, types):
    """A random transpose for the transpose probes: (dtype, shape, perm), rank 3 or 4, 200,000 to
    8,000,000 elements, a permutation that moves a dimension; None when the drawn shape is out of
    that range (the caller draws again, from the same generator)."""
    dt = rng.choice(types)
    rank = rng.choice([3, 4])
    shape = [rng.choice([rng.randint(2, 40), rng.randint(33, 300)]) for _ in range(rank)]
    numel = 1
    for v in shape:
        numel *= v
    if not 200_000 <= numel <= 8_000_000:
        return None
    perm = list(range(rank))
    while perm == list(range(rank)):
        rng.shuffle(perm)
    return dt, shape, perm


def tpusim_ops(tpusim, text, gen):
    """tpusim's kernels for `text` on generation `gen` (v4 as one TensorCore): (name, kind,
    cycles) of each op of `tpusim run --mode timing --report`."""
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        subprocess.run([tpusim, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                        "--quiet"], check=True)
        r = json.load(open(rep))
    return [(o["name"], o["kind"], o["cycles"]) for o in r["ops"]]


def tpusim_step_cycles(text, gen, d):
    """tpusim's step cycles for `text` on generation `gen` (v4 as one TensorCore), from the
    summary line of `tpusim run --mode timing` with the disk cache off (TPUSIM: the binary)."""
    path = os.path.join(d, "t.hlo")
    open(path, "w").write(text)
    env = dict(os.environ, TPUSIM_CACHE="off")
    r = subprocess.run([TPUSIM, "run", path, "--mode", "timing", "--chip", PRESET.get(gen, gen)],
                       capture_output=True, text=True, env=env)
    return int(re.search(r"\((\d+) cycles", r.stdout).group(1))


def each_compiled(cases, hlo, chips):
    """The probes' loop: for each case (a tuple of `hlo`'s arguments) and generation in `chips`,
    yields (case, chip, text, tpusim's kernels as tpusim_ops gives them, the compiler's summary,
    its compiled program). A case the compiler fails on prints one JSON line saying so and is
    skipped."""
    with tempfile.TemporaryDirectory() as d:
        for case in cases:
            text = hlo(*case)
            for chip in chips:
                own = tpusim_ops(TPUSIM, text, chip)
                summ, out = compile_retry(text, TOPO[chip], d)
                if out is None:
                    print(json.dumps(dict(case=case, chip=chip, error="compile failed")), flush=True)
                    continue
                yield case, chip, text, own, summ, out


def chips_arg(argv):
    """The generations a probe runs on: argv[1] as a comma-separated list, else all four."""
    return argv[1].split(",") if len(argv) > 1 else ["v4", "v5e", "v5p", "v6e"]


def emit(rec, out):
    """Prints one probe record as a JSON line and appends it to the open file `out` (if any),
    flushed at once so a probe cut short keeps what it measured."""
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()
