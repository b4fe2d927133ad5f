#!/usr/bin/env python3
"""plan.py: `tpusim plan` — which chip, slice and sharding trains a transformer fastest or
cheapest. For every chip, slice size and mesh it writes the per-chip training-step program
(gen.py), times it with `tpusim run --mode timing` (two processes at a time; --in-process:
through libtpusim in this process, inproc.py), and ranks the
candidates that fit HBM by cost, with the Pareto front of cost against time, goodput under
failures and checkpoints, and `plan buckets` for padding waste. Standard library only
(matplotlib draws the SVG when present)."""
import argparse
import itertools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402
import buckets  # noqa: E402
import svg  # noqa: E402
import hloplan  # noqa: E402
import inproc  # noqa: E402
import serve  # noqa: E402
import cmdline  # noqa: E402
from plan_report import fmt_bytes, fmt_days, fmt_usd, finite, mesh_s, stages, text_report  # noqa: E402,F401


class InputError(Exception):
    pass


def die(msg):
    """Exits 2 with one error line, already located (FILE:LINE:COL: error: ...)."""
    sys.stdout.flush()
    sys.stderr.write(cmdline.escape(msg) + "\n")
    sys.exit(2)


# --- the model file ------------------------------------------------------------------------

FIELDS = {  # name: (type, required, check)
    "name": (str, False, None),
    "layers": (int, True, lambda v: v >= 1),
    "d_model": (int, True, lambda v: v >= 1),
    "heads": (int, True, lambda v: v >= 1),
    "head_dim": (int, True, lambda v: v >= 1),
    "mlp": (int, True, lambda v: v >= 1),
    "vocab": (int, True, lambda v: v >= 1),
    "seq": (int, True, lambda v: v >= 1),
    "batch_tokens": (int, True, lambda v: v >= 1),
    "train_tokens": ((int, float), True, lambda v: v > 0),
    "dtype": (str, False, lambda v: v in ("bf16", "f32")),
    "optimizer": (str, False, lambda v: v in ("adam", "sgd")),
    "mlp_kind": (str, False, lambda v: v in ("gelu", "swiglu", "relu")),
    # MaxText's `attention`: flash (its Pallas kernel, the default) or dot_product (the
    # [b, h, S, S] scores materialised, as MaxText ran before its flash kernel, 2023-09)
    "attention": (str, False, lambda v: v in ("flash", "dot_product")),
    # serial (attention, then the MLP on its output) or parallel (both on the layer input,
    # summed: MaxText's default decoder until 2024-02, PaLM)
    "block": (str, False, lambda v: v in ("serial", "parallel")),
    "experts": (int, False, lambda v: v >= 0),
    "top_k": (int, False, lambda v: v >= 1),
    "kv_heads": (int, False, lambda v: v >= 1),  # grouped- / multi-query attention (K and V heads)
    # The layer's non-matmul work (tools/plan/norms.py): RMSNorm of the residual before the
    # matmuls (rms, the default, or none), rotary position embeddings on q and k (rope, the
    # default, or none), and MaxText's 2023 RMSNorm of each head's q and k (qk_norm qk, its
    # decoder of 2023-04) or q, k and v (qkv, 2023-12; none, the default)
    "norm": (str, False, lambda v: v in ("rms", "none")),
    "position": (str, False, lambda v: v in ("rope", "none")),
    "qk_norm": (str, False, lambda v: v in ("qk", "qkv", "none")),
}
WANT = {"dtype": "bf16 or f32", "optimizer": "adam or sgd", "mlp_kind": "gelu, swiglu or relu",
        "attention": "flash or dot_product", "block": "serial or parallel", "norm": "rms or none",
        "position": "rope or none", "qk_norm": "qk, qkv or none"}
# Upper bounds, checked before any program is written: far beyond any model trained, and
# small enough that the generated programs' shapes and the planner's sums stay exact.
LIMITS = {"layers": 1 << 14, "d_model": 1 << 20, "heads": 1 << 16, "head_dim": 1 << 16, "mlp": 1 << 22,
          "vocab": 1 << 24, "seq": 1 << 24, "batch_tokens": 1 << 40, "train_tokens": 1e18, "experts": 1 << 16,
          "top_k": 1 << 16, "kv_heads": 1 << 16}


def where(text, key, at_key=False):
    """line:col of the value of "key" (or of the key) in a JSON text (1-based), or 1:1. Each
    string of the text is decoded in turn (so a key written with escapes, "a\\/b" or
    "a\\nb", is found) until one equal to `key` is followed by ':'."""
    i, n = 0, len(text)
    while True:
        i = text.find('"', i)
        if i < 0:
            return 1, 1
        try:
            s, end = json.decoder.scanstring(text, i + 1)
        except ValueError:
            return 1, 1
        k = end
        while k < n and text[k] in " \t\r\n":
            k += 1
        if s == key and k < n and text[k] == ":":
            pos = i
            if not at_key:
                pos = k + 1
                while pos < n and text[pos] in " \t\r\n":
                    pos += 1
            line = text.count("\n", 0, pos) + 1
            col = pos - (text.rfind("\n", 0, pos) + 1) + 1
            return line, col
        i = end


def load_model(path, text=None):
    """The model file at `path` (or its `text`), checked; InputError (one located line) if bad."""
    if text is None:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise InputError(f"{path}:0:0: error: cannot read the model file: {e.strerror}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
            raise InputError(f"{path}:{line}:{col}: error: the model file is not UTF-8 text")
    try:
        m = json.loads(text, parse_constant=lambda c: float(c))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}:{e.colno}: error: {e.msg}")
    except RecursionError:
        raise InputError(f"{path}:1:1: error: the model file nests too deeply")
    if not isinstance(m, dict):
        raise InputError(f"{path}:1:1: error: the model file must hold one JSON object")
    for k in m:
        if k not in FIELDS:
            line, col = where(text, k, at_key=True)
            raise InputError(f"{path}:{line}:{col}: error: unknown field '{k}' (fields: {', '.join(FIELDS)})")
    for k, (t, req, chk) in FIELDS.items():
        if k not in m:
            if req:
                raise InputError(f"{path}:1:1: error: missing field '{k}'")
            continue
        v = m[k]
        line, col = where(text, k)
        if isinstance(v, bool) or not isinstance(v, t):
            raise InputError(f"{path}:{line}:{col}: error: '{k}' must be {'a string' if t is str else 'a number'}")
        if isinstance(v, float) and t is int:
            raise InputError(f"{path}:{line}:{col}: error: '{k}' must be a whole number")
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(f"{path}:{line}:{col}: error: '{k}' must be a finite number")
        if chk and not chk(v):
            raise InputError(f"{path}:{line}:{col}: error: '{k}' is {v!r}; it must be "
                             f"{WANT.get(k, 'at least 1' if t is int else 'positive')}")
        if k in LIMITS and v > LIMITS[k]:
            raise InputError(f"{path}:{line}:{col}: error: '{k}' is {v!r}; the planner takes at most {LIMITS[k]:g}")
    m.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    m.setdefault("dtype", "bf16")
    m.setdefault("optimizer", "adam")
    m.setdefault("mlp_kind", "gelu")
    m.setdefault("experts", 0)
    if m["experts"]:
        if "top_k" not in m:
            raise InputError(f"{path}:1:1: error: an MoE model (experts > 0) needs 'top_k'")
        if m["top_k"] > m["experts"]:
            line, col = where(text, "top_k")
            raise InputError(f"{path}:{line}:{col}: error: top_k {m['top_k']} exceeds experts {m['experts']}")
    if m["heads"] % m.get("kv_heads", m["heads"]):
        line, col = where(text, "kv_heads")
        raise InputError(f"{path}:{line}:{col}: error: heads {m['heads']} is not a multiple of kv_heads {m['kv_heads']}")
    if m["batch_tokens"] % m["seq"]:
        line, col = where(text, "batch_tokens")
        raise InputError(f"{path}:{line}:{col}: error: batch_tokens {m['batch_tokens']} is not a whole number of "
                         f"sequences of {m['seq']}")
    return m


# --- chips, slices, prices -----------------------------------------------------------------

SLICES_2D = [1, 4, 8, 16, 32, 64, 128, 256]  # Cloud's v5e / v6e slice sizes (chips)


def load_chip(root, name):
    p = os.path.join(root, "chips", name + ".json")
    try:
        j = json.load(open(p))
    except OSError:
        raise InputError(f"error: unknown chip '{name}' (no {p})")
    v = {k: (x["value"] if isinstance(x, dict) and "value" in x else x) for k, x in j.items()}
    return {"name": name, "hbm": v["hbm_bytes"], "peak": v["peak_bf16_flops"], "max_chips": v.get("max_chips") or 1,
            "topology": v.get("topology"), "cores": v.get("tensorcores") or 1,
            "we_min": v.get("windowed_einsum_min_chips"), "we_max": v.get("windowed_einsum_max_chips"),
            "onchip": onchip_bytes(v), "max_dims": v.get("max_dims")}


def onchip_bytes(v):
    """The most of a step's values that can stay off HBM: on a one-core chip whose kernels
    leave VMEM room between them, memory-space assignment keeps values there, a loop's
    state included (docs/timing.md, "Memory spaces"), at most the whole VMEM; none on a
    megacore chip. The HBM lower bounds below subtract it, so they stay lower bounds."""
    cores, vmem, scoped = v.get("tensorcores") or 1, v.get("vmem_bytes") or 0, v.get("scoped_vmem_bytes") or 0
    return vmem if cores == 1 and scoped < vmem else 0


def windowed(chip, n, d, f, t):
    """Whether the XLA TPU compiler runs the FSDP gathers and reduce-scatters of this mesh as
    windowed einsums: weights split over every chip, on a slice within the chip's range
    (docs/spmd.md, "Windowed einsum")."""
    lo, hi = chip.get("we_min"), chip.get("we_max")
    return bool(lo) and d == 1 and t == 1 and f == n and lo <= n <= (hi or n)


def slice_sizes(chip, max_chips):
    top = min(chip["max_chips"], max_chips)
    if chip["topology"] == "2d-torus":
        return [n for n in SLICES_2D if n <= top]
    out, n = [], 4  # 3-D tori: whole hosts of 2x2x1 upwards
    while n <= top:
        out.append(n)
        n *= 2
    return out


def default_dims(chip, n):
    """tpusim's default slice shape for n chips of a 3-D torus chip (tpu_topology_default, a
    power of two: 1x1x1, 1x2x1, 2x2x1, then the last of the shortest axes doubles); None
    otherwise."""
    if chip["topology"] == "2d-torus" or n < 1 or n & (n - 1):
        return None
    dims, k = [1, 1, 1], 1
    while k < n:
        axes = 2 if k < 4 else 3
        best = 0
        for i in range(1, axes):
            if dims[i] <= dims[best]:
                best = i
        dims[best] *= 2
        k *= 2
    return dims


def jax_assignment(dims, sizes):
    """jax.experimental.mesh_utils._create_device_mesh_for_nd_torus on a slice of shape dims:
    each logical axis (sizes slowest first), most network-intensive (last) first, takes the
    first subset of the free physical axes, most axes first, whose sizes multiply to its
    size. The physical axes of each logical axis (slowest logical axis first), or None where
    JAX raises (NotImplementedError without allow_split_physical_axes)."""
    free = list(dims)
    assign = []
    for size in reversed(sizes):  # tensor first
        got = ()
        for k in range(len(free), 0, -1):
            for c in itertools.combinations(range(len(free)), k):
                if math.prod(free[i] for i in c) == size:
                    got = c
                    break
            if got:
                break
        if not got and size > 1:
            return None
        for i in got:
            free[i] = 0
        assign.append(got)
    return assign[::-1]


def other_shapes(chip, n, dims):
    """The other shapes of an n-chip slice of a 3-D torus chip that a user can ask for in place
    of the default: whole cubes of 4x4x4 (every axis a multiple of 4, so every axis wraps;
    slices of 64 chips and more), within the chip's largest slice (max_dims, any
    orientation), each once in ascending axis order, the most cubic (shortest longest axis)
    first."""
    big = sorted(chip.get("max_dims") or [])
    if n < 64 or len(big) != 3:
        return []
    out = []
    for a in range(4, n + 1, 4):
        for b in range(a, n // a + 1, 4):
            if (n // a) % b:
                continue
            c = n // (a * b)
            if c < b or c % 4 or a * b * c != n:
                continue
            s = [a, b, c]
            if s != sorted(dims) and all(x <= y for x, y in zip(s, big)):
                out.append(s)
    return sorted(out, key=lambda s: (s[2], s[1]))


def mesh_topology(chip, st):
    """The --topology that lays the generated program's mesh (data, stage, fsdp, tensor, device
    id tensor-minor) onto the slice as MaxText's mesh does: jax.experimental.mesh_utils.
    create_device_mesh (_create_device_mesh_for_nd_torus, jax_assignment) gives each logical
    axis, most network-intensive (last) first, the first subset of the free physical axes,
    most axes first, whose sizes multiply to its size (a v5p 4x4x8 with fsdp 16 x tensor 8:
    tensor on the z ring of 8, fsdp on the 4x4 x-y plane; checked with libtpu's compile-only
    topology, docs/plan.md). tpusim numbers a slice's chips x fastest, so the shape lists the
    physical axes fastest logical axis first: "8x4x4". Where JAX finds no assignment on the
    default shape it raises, and the mesh runs only on another shape of the same chips
    (other_shapes: v5p-1024's 8x8x8 has no axis or plane of 16 for tensor 16, 4x8x16 has): the
    first on which it finds one. None keeps tpusim's default shape (the default already, a
    2-D torus, several slices, one axis over the whole slice, or no shape works)."""
    n = st.N
    dims = default_dims(chip, n)
    sizes = [st.R, st.P, st.F, st.T]
    if dims is None or st.c.get("slices", 1) > 1 or sum(x > 1 for x in sizes) < 2:
        return None  # one axis over the whole slice: any order of it is the whole slice
    assign = jax_assignment(dims, sizes)
    if assign is None:
        for other in other_shapes(chip, n, dims):
            assign = jax_assignment(other, sizes)
            if assign is not None:
                dims = other
                break
        else:
            return None
    # JAX's physical order, then reversed: the mesh's fastest axis is tpusim's x.
    order = [i for got in assign for i in got if dims[i] > 1]
    shape = [dims[i] for i in reversed(order)]
    shape += [1] * (len(dims) - len(shape))  # axes of one chip last, as the default has them
    return None if shape == default_dims(chip, n) else "x".join(map(str, shape))


def slice_name(chip, n):
    return f"{chip['name']}-{n * chip['cores']}"


def load_prices(root):
    p = os.path.join(root, "chips", "prices.json")
    try:
        return json.load(open(p))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{p}:1:1: error: cannot read the price table: {e}")


def price_of(prices, chip, kind):
    e = prices.get("chips", {}).get(chip, {}).get(kind)
    if not e or e.get("usd_per_chip_hour") is None:
        return None, "none"
    return e["usd_per_chip_hour"], e.get("status", "uncertain")


# --- candidates ----------------------------------------------------------------------------

def pow2_upto(n):
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out


def state_bytes_per_chip(m, F, T, P=1):
    """Parameters (f32) and optimizer moments per chip: exact for the generated program's
    sharding up to rounding (every weight split over fsdp x tensor, the layers' over the P
    pipeline stages too: the embedding and LM head are on every stage)."""
    per = 4 + (8 if m["optimizer"] == "adam" else 0) + 4  # param, moments, gradient accumulator
    ends = 2 * m["d_model"] * m["vocab"]
    return ((gen.param_count(m) - ends) / P + ends) * per / (F * T)


def held_iterations(st, cand):
    """The pipeline iterations whose activations a stage holds at once. The generated loop
    (GPipe, circular) keeps every iteration's until the backward loop: st.Tp of them. 1F1B as
    one SPMD program (examples/pod/pp1, docs/pod.md "Pipelines"): iteration t runs the forward
    of microbatch t - s and the backward of microbatch t - 2(P - 1) + s on stage s, in
    lockstep, so stage 0 holds microbatches t - 2(P - 1) .. t: at most 2P - 1 (all M when
    M < 2P - 1)."""
    if st.P <= 1:
        return 1
    if cand.get("schedule") == "1f1b":
        return min(2 * st.P - 1, st.mb)
    return st.Tp


def onef1b_iterations(st):
    """A one-program SPMD 1F1B loop's iterations: M + 2(P - 1), each a forward and a backward
    of one microbatch (or padding) on every stage."""
    return st.mb + 2 * (st.P - 1)


def onef1b_timing(st, step_s, hw, loops):
    """The 1F1B step timed from the generated GPipe program: its forward and backward
    pipeline loops (tpusim's report, M + P - 1 iterations each) give one forward and one
    backward iteration's wall time, f and b; the 1F1B loop runs T = M + 2(P - 1) iterations
    of f + b in their place, padding in 2(P - 1) of them (the bubble pipeline.c finds in
    such a loop). Everything outside the loops (embedding, head, optimizer) is the GPipe
    program's. The hardware FLOPs are the GPipe program's (the extra padding iterations'
    matmuls are not counted), so hw_util is a lower bound. None when the report lacks the
    two GPipe loops."""
    gp = [x for x in loops if x["stages"] == st.P and x["padding_iterations"] == st.P - 1 and
          x["iterations"] == st.Tp]
    if len(gp) != 2:
        return None
    it = sum(x["loop_seconds"] / x["iterations"] for x in gp)  # f + b
    T = onef1b_iterations(st)
    step = step_s - sum(x["loop_seconds"] for x in gp) + T * it
    pad = 2 * (st.P - 1)
    return {"step_s": step, "hw_util": hw * step_s / step, "bubble": pad / T, "bubble_s": pad * it,
            "iterations": T, "timed": "1f1b-from-gpipe-loops"}


def saved_row_bytes(st):
    """The activations one layer saves for one pipeline iteration (or the whole step)."""
    return sum(math.prod(shape) * (2 if dt == "bf16" else 4) for shape, dt in st.saved().values())


def onef1b_saving(m, cand):
    """How much less a 1F1B stage holds than the generated GPipe loop (whose peak tpusim
    measures): the saved activations of the st.Tp - min(P, M) iterations never in flight at
    once, for each of the stage's layers."""
    st = gen.Step(m, cand)
    if cand.get("schedule") != "1f1b" or st.check() or st.P <= 1:
        return 0
    return saved_row_bytes(st) * st.L * (st.Tp - held_iterations(st, cand))


def saved_bytes(m, cand):
    """What the backward loop must hold at once besides the parameter state, in any buffer
    assignment: every layer's saved activations (one copy), and the layer's gathered weights
    in the loop state plus, when gathers are pipelined, the next layer's arriving beside
    them. A lower bound on tpusim's peak (which adds temporaries)."""
    st = gen.Step(m, cand)
    if st.check():
        return 0
    tot = saved_row_bytes(st) * st.L * held_iterations(st, cand)  # a pipeline keeps its in-flight iterations
    if st.F > 1:
        w = sum(math.prod(full) for full, _ in st.lw.values()) * (2 if st.cd == "bf16" else 4)
        tot += w * (2 if st.pf else 1)
    return tot


def meshes(m, n, a):
    """(data, fsdp, tensor, pipeline) with their product n: powers of two, or the pinned
    sizes; pipeline 1 unless --pipeline pins it or --max-pipeline searches it."""
    out = []
    K = a.slices if a.dcn_axis == "pipeline" else 1  # stages over DCN: K x the slice's
    for p in ([a.pipeline] if a.pipeline else pow2_upto(a.max_pipeline)):
        if n % p or m["layers"] % (p * K * (a.pipeline_repeats if p * K > 1 else 1)):
            continue
        for t in ([a.tensor] if a.tensor else pow2_upto(min(n // p, a.max_tensor))):
            if n % (t * p):
                continue
            for f in ([a.fsdp] if a.fsdp else ([n // (t * p * a.data)] if a.data else pow2_upto(n // (t * p)))):
                if f < 1 or n % (t * f * p):
                    continue
                d = n // (t * f * p)
                if (a.data and d != a.data) or (K > 1 and d != 1):
                    continue
                out.append((d, f, t, p))
    return out


def micro_options(m, d, f, a):
    B = m["batch_tokens"] // m["seq"]
    if a.dcn_axis == "data":
        d *= a.slices  # the data axis runs over every slice
    if B % (d * f):
        return []
    b = B // (d * f)
    if a.micro:
        return [a.micro] if b % a.micro == 0 else []
    return [k for k in pow2_upto(b) if b % k == 0]


# --- running tpusim ------------------------------------------------------------------------

def hbm_peak_1chip(a, chip, st):
    """hbm_peak from `tpusim compile --emit asm`'s .program line (read, then the rest dropped)."""
    fd, path = tempfile.mkstemp(suffix=".hlo")
    with os.fdopen(fd, "w") as fh:
        fh.write(st.module())
    try:
        p = subprocess.Popen([a.tpusim, "compile", path, "--chip", chip["name"], "--emit", "asm"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        peak = 0
        for _ in range(4):
            line = p.stdout.readline()
            mm = re.search(r"hbm_peak=(\d+)", line)
            if mm:
                peak = int(mm.group(1))
                break
        p.stdout.close()
        p.kill()
        p.wait()
        return peak
    finally:
        os.remove(path)


# The collectives MaxText's scripts let the XLA TPU compiler run asynchronously, per chip (their
# LIBTPU_INIT_ARGS): the v4 scripts set --xla_enable_async_all_gather=true alone (1xv4-128.sh at
# 281e04bf, 1xv4-384.sh at e286533d, configs/v4/22b.sh and 52b.sh from 76bd53b0 to 50a7c64f,
# 2024-09); the v5e and v5p scripts the async collective fusion flags (every collective). libtpu
# with no flags leaves them synchronous too (FSDP steps on v4:4x4x4, compile-only; docs/plan.md).
MAXTEXT_ASYNC = {"v4": "all-gather"}


def xla_async(a, chip):
    """--xla-async for this chip: as given, or (auto) as MaxText's scripts for it set it."""
    if a.xla_async != "auto":
        return a.xla_async
    return MAXTEXT_ASYNC.get(chip["name"], "all")


def time_program(a, chip, st, tmp, tag):
    """tpusim's verdict on one program: ("ok", report) or ("no-fit", bytes) or ("error", msg)."""
    topo = mesh_topology(chip, st)
    if a.lib is not None and xla_async(a, chip) == "all":  # in this process, through libtpusim (inproc.py)
        try:
            return "ok", a.lib.time(st.module(), chip.get("spec", chip["name"]), f"c{tag}.hlo", slices=a.slices,
                                    topology=topo)
        except inproc.Failure as e:
            mm = re.search(r"program needs (\d+) bytes of HBM", str(e))
            return ("no-fit", int(mm.group(1))) if mm else ("error", str(e))
    path = os.path.join(tmp, f"c{tag}.hlo")
    rep = os.path.join(tmp, f"c{tag}.json")
    with open(path, "w") as fh:
        fh.write(st.module())
    r = subprocess.run([a.tpusim, "run", path, "--mode", "timing", "--chip", chip.get("spec", chip["name"]), "--quiet",
                        "--report", rep] + (["--slices", str(a.slices)] if a.slices > 1 else []) +
                       (["--topology", topo] if topo else []) +
                       (["--sync-collectives"] if xla_async(a, chip) == "all-gather" else []),
                       capture_output=True, text=True)
    try:
        if r.returncode != 0:
            mm = re.search(r"program needs (\d+) bytes of HBM", r.stderr)
            if r.returncode == 2 and mm:
                return "no-fit", int(mm.group(1))
            return "error", r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        return "ok", json.load(open(rep))
    finally:
        for p in (path, rep):
            if not a.keep and os.path.exists(p):
                os.remove(p)


def run_one(a, chip, cand, tmp, idx):
    """Times one candidate. tpusim simulates every iteration of the microbatch loop, and they
    are identical (same program, same shapes), so with more than three microbatches the step is
    t(2) + (m - 2) (t(3) - t(2)) from programs with two and three iterations (--exact times the
    whole loop; tests/cli/plan.sh checks both agree). Not one and two: a loop that runs once is
    compiled without the loop's code motion (XLA's WhileLoopSimplifier removes it first, so its
    reduce-scatters are not sunk after it), and the two would not differ by one iteration."""
    st = gen.Step(a.model, cand)
    why = st.check()
    if why:
        return {"status": "invalid", "why": why}
    m = cand["micro"]
    if m <= 3 or a.exact or stages(cand) > 1:  # a pipeline's loops are not per microbatch
        kind, j = time_program(a, chip, st, tmp, idx)
        if kind != "ok":
            return {"status": kind, "why": "HBM" if kind == "no-fit" else j, **({"hbm_need": j} if kind == "no-fit" else {})}
        step_s, hw = j["step"]["seconds"], j["flops"]["mfu"]
        comm = [j.get("pod", {}).get(k, 0.0) for k in ("dcn_seconds", "ici_seconds")]
    else:
        k1, j1 = time_program(a, chip, gen.Step(a.model, dict(cand, trips=2)), tmp, f"{idx}a")
        if k1 != "ok":
            return {"status": k1, "why": "HBM" if k1 == "no-fit" else j1, **({"hbm_need": j1} if k1 == "no-fit" else {})}
        k2, j2 = time_program(a, chip, gen.Step(a.model, dict(cand, trips=3)), tmp, f"{idx}b")
        if k2 != "ok":
            return {"status": k2, "why": "HBM" if k2 == "no-fit" else j2, **({"hbm_need": j2} if k2 == "no-fit" else {})}
        c1, c2 = j1["step"]["cycles"], j2["step"]["cycles"]
        n = m - 2  # iterations beyond the two-iteration program's
        step_s = (c1 + n * (c2 - c1)) / j1["step"]["clock_hz"]
        # The hardware-FLOP utilisation scales the same way (FLOPs per iteration are equal).
        f1 = j1["flops"]["mfu"] * c1
        f2 = j2["flops"]["mfu"] * c2
        hw = (f1 + n * (f2 - f1)) / (c1 + n * (c2 - c1))
        j = j2
        # Collective time over DCN and ICI per step, extrapolated the same way.
        comm = [p1 + n * (p2 - p1) for p1, p2 in
                ((j1.get("pod", {}).get(k, 0.0), j2.get("pod", {}).get(k, 0.0)) for k in ("dcn_seconds", "ici_seconds"))]
        ici = [jj.get("pod", {}).get("ici_wait_fraction", 0.0) * jj["step"]["cycles"] for jj in (j1, j2)]
        j.setdefault("pod", {})
        if j1.get("pod"):
            j["pod"]["ici_wait_fraction"] = (ici[0] + n * (ici[1] - ici[0])) / (c1 + n * (c2 - c1))
    pod = j.get("pod", {})
    peak = pod.get("hbm_peak_bytes_per_chip")
    if peak is None and "hbm_peak_bytes" in j and (m <= 3 or a.exact):  # st timed in-process: the library says it
        peak = j["hbm_peak_bytes"]
    if peak is None:  # one chip: the report has no pod section; the program header has the peak
        peak = hbm_peak_1chip(a, chip, st)
    pl = pod.get("pipelines", [])
    onef1b = onef1b_timing(st, step_s, hw, pl) if stages(cand) > 1 and cand.get("schedule") == "1f1b" else None
    if onef1b:  # 1F1B: the GPipe loops' iterations, M + 2(P - 1) of a forward and a backward
        step_s, hw = onef1b["step_s"], onef1b["hw_util"]
    saving = onef1b_saving(a.model, cand)  # 1F1B: the GPipe program's peak, fewer activations held
    peak -= saving
    if peak > chip["hbm"]:  # --ignore-hbm: timed on a copy of the chip with more HBM
        return {"status": "no-fit", "hbm_need": peak, "why": "HBM", "step_s": step_s,
                "hw_util": hw, "hbm_peak": peak, "ici_wait": pod.get("ici_wait_fraction", 0.0),
                **({"dcn_s": comm[0], "ici_s": comm[1]} if a.slices > 1 else {})}
    out = {"status": "ok", "step_s": step_s, "hw_util": hw, "hbm_peak": peak,
           "ici_wait": pod.get("ici_wait_fraction", 0.0), "topology": pod.get("topology", "1 chip")}
    if stages(cand) > 1:
        out.update(held_iterations=held_iterations(st, cand), **({"hbm_saved_1f1b": saving} if saving else {}))
    if a.slices > 1:  # the collectives' time over the data-center network beside ICI's
        out.update(dcn_s=comm[0], ici_s=comm[1])
    if onef1b:
        out.update(bubble=onef1b["bubble"], bubble_s=onef1b["bubble_s"], iterations=onef1b["iterations"],
                   timed=onef1b["timed"])
    elif stages(cand) > 1 and pl:  # the bubble tpusim finds in the pipeline loops
        out.update(bubble=max(x["bubble_fraction"] for x in pl),
                   bubble_s=sum(x["bubble_seconds_per_stage"] for x in pl), iterations=st.Tp,
                   timed="gpipe-program" if cand.get("schedule") == "1f1b" else "generated-program")
    return out


def search_mesh(a, chip, n, mesh, tmp, counter):
    """The fastest fitting configs of one mesh: for remat off and on, microbatch counts from
    the fewest up to the first that fits (more microbatches only shrink the activations)."""
    d, f, t, p = mesh
    results = []
    pt = p * (a.slices if a.dcn_axis == "pipeline" else 1)  # the stages, over every slice
    state = state_bytes_per_chip(a.model, f, t, pt)
    base = {"chip": chip["name"], "chips": n * a.slices, "data": d, "fsdp": f, "tensor": t, "pipeline": p,
            "repeats": a.pipeline_repeats if pt > 1 else 1, "dcn": a.dcn_axis,
            **({"schedule": a.pipeline_schedule} if pt > 1 else {}),
            "slice": slice_name(chip, n) + (f" x{a.slices}" if a.slices > 1 else ""), "slices": a.slices,
            "windowed": windowed(chip, n, d, f, t) and pt == 1 and not a.no_windowed_einsum,
            **({"overlap": False} if xla_async(a, chip) == "all-gather" else {})}
    if state - chip["onchip"] > chip["hbm"] and not a.ignore_hbm:
        return [dict(base, micro=None, remat=None, status="no-fit", why="weights+optimizer",
                     hbm_need=int(state))]
    mos = micro_options(a.model, d, f, a)
    if mos and pt > 1:
        return search_pipeline(a, chip, base, state, mos, tmp, counter)
    if not mos:
        B = a.model["batch_tokens"] // a.model["seq"]
        return [dict(base, micro=None, remat=None, status="invalid",
                     why=f"global batch of {B} sequences does not split over data x fsdp = {d * f}")]
    # Remat on first: it holds less than remat off at any microbatch count, so remat off
    # needs at least the count remat on fits at, and cannot fit where remat on does not.
    fit_on = None
    pol = {"on": [True], "off": [False], "both": [True, False]}.get(a.remat, [a.remat])  # or a policy's name
    for remat in pol:
        opts = mos
        if not remat and a.remat == "both" and not a.ignore_hbm:
            if fit_on is None:
                results.append(dict(base, micro=mos[-1], remat=False, status="no-fit",
                                    why="remat on does not fit either"))
                continue
            opts = [x for x in mos if x >= fit_on]
        # The fewest microbatches that fit: more only shrink the activations, so the first
        # fit is found by bisection, after skipping counts whose lower bound is over HBM.
        lo = 0
        while lo < len(opts) - 1 and not a.ignore_hbm and \
                state + saved_bytes(a.model, dict(base, micro=opts[lo], remat=remat)) - chip["onchip"] > chip["hbm"]:
            lo += 1
        cand = dict(base, micro=opts[lo], remat=remat)
        lb = state + saved_bytes(a.model, cand)
        if lb - chip["onchip"] > chip["hbm"] and not a.ignore_hbm:
            results.append(dict(cand, status="no-fit", why="activations", hbm_need=int(lb)))
            continue
        tried = {}

        def run(i):
            if i not in tried:
                c = dict(base, micro=opts[i], remat=remat)
                r = run_one(a, chip, c, tmp, next(counter))
                r.update(c)
                tried[i] = r
            return tried[i]

        hi = len(opts) - 1 if not a.ignore_hbm else lo
        while lo < hi:
            mid = (lo + hi) // 2
            if run(mid)["status"] == "no-fit":
                lo = mid + 1
            else:
                hi = mid
        results.append(run(lo))
        if remat is True and results[-1]["status"] == "ok":
            fit_on = opts[lo]
    return results


def search_pipeline(a, chip, base, state, mos, tmp, counter):
    """A pipelined mesh: more microbatches shrink both the bubble ((P - 1) / (M + P - 1)) and
    the activations but make each stage's matmuls smaller, so every count of at least P (all
    counts when none is) whose lower bound fits is timed, for each remat policy asked, and
    the fastest that fits kept."""
    P = stages(base)
    opts = [x for x in mos if x >= P] or mos
    if base["repeats"] > 1:  # a circular pipeline takes microbatches in multiples of the stages
        opts = [x for x in mos if x % P == 0]
        if not opts:
            return [dict(base, micro=None, remat=None, status="invalid",
                         why=f"no microbatch count is a multiple of the {P} stages")]
    pol = {"on": [True], "off": [False], "both": [True, False]}.get(a.remat, [a.remat])
    results = []
    for remat in pol:
        best, last = None, None
        for mo in opts:
            c = dict(base, micro=mo, remat=remat)
            lb = state + saved_bytes(a.model, c)
            if lb - chip["onchip"] > chip["hbm"] and not a.ignore_hbm:
                last = dict(c, status="no-fit", why="activations", hbm_need=int(lb))
                continue
            r = run_one(a, chip, c, tmp, next(counter))
            r.update(c)
            if r["status"] == "ok" and (best is None or r["step_s"] < best["step_s"]):
                best = r
            elif r["status"] != "ok":
                last = r
        results.append(best or last)
    return results


# --- goodput -------------------------------------------------------------------------------

def goodput(a, r, m):
    """Expected wall time under failures (first order, Young/Daly): checkpoints of delta s
    every tau s, failures at rate n*lambda per hour; each costs a restart plus tau/2 of
    recomputation on average."""
    steps = math.ceil(m["train_tokens"] / m["batch_tokens"])
    T = steps * r["step_s"]
    ck_bytes = gen.param_count(m) * (12 if m["optimizer"] == "adam" else 4)
    delta = ck_bytes / (r["chips"] * a.storage_bw * 1e9)
    g = {"checkpoint_bytes": ck_bytes, "checkpoint_s": delta, "compute_s": T}
    if not a.failure_rate:
        g.update({"wall_s": T, "lost_s": 0.0})
        return g
    mtbf = 3600.0 / (a.failure_rate * r["chips"])
    tau_opt = math.sqrt(2 * delta * mtbf)
    steps = math.ceil(m["train_tokens"] / m["batch_tokens"])
    every = min(a.checkpoint_every or max(1, round(tau_opt / r["step_s"])), steps)
    tau = every * r["step_s"]
    restart = a.restart_min * 60
    denom = 1 - (tau / 2 + restart + delta / 2) / mtbf
    wall = float("inf") if denom <= 0 else T * (1 + delta / tau) / denom
    g.update({"mtbf_s": mtbf, "optimal_every_steps": max(1, round(tau_opt / r["step_s"])), "optimal_interval_s": tau_opt,
              "every_steps": every, "interval_s": tau, "wall_s": wall, "lost_s": wall - T,
              "failures": wall / mtbf if wall != float("inf") else float("inf")})
    return g


# --- the plan (its text report: plan_report.py) --------------------------------------------

def pareto(rows):
    pts = sorted((r for r in rows if r.get("cost") is not None), key=lambda r: (r["wall_s"], r["cost"]))
    front, best = [], float("inf")
    for r in pts:
        if r["cost"] < best:
            front.append(r)
            best = r["cost"]
    return front


def plan(a):
    m = a.model
    chips = [load_chip(a.root, c) for c in a.chips.split(",")]
    tmp0 = tempfile.mkdtemp(prefix="tpusim-plan-chips-")
    if a.ignore_hbm:  # time every candidate, fitting or not: the chip with 1 PiB of HBM
        for chip in chips:
            j = json.load(open(os.path.join(a.root, "chips", chip["name"] + ".json")))
            j["hbm_bytes"]["value"] = 1 << 50
            j["hbm_bytes"]["note"] = "raised by tpusim plan --ignore-hbm: timing regardless of fit"
            chip["spec"] = os.path.join(tmp0, chip["name"] + ".json")
            json.dump(j, open(chip["spec"], "w"))
    prices = load_prices(a.root)
    a.lib = None
    lib_path = inproc.find(a.tpusim) if a.in_process else None
    if lib_path:
        try:
            a.lib = inproc.Lib(lib_path)
        except OSError:  # not loadable here: processes, as before
            a.lib = None
    tmp = tempfile.mkdtemp(prefix="tpusim-plan-")
    t0 = time.perf_counter()
    tasks = []
    for chip in chips:
        sizes = slice_sizes(chip, a.max_chips)
        if a.slice:
            sizes = [n for n in sizes if n == a.slice] or ([a.slice] if a.slice <= chip["max_chips"] else [])
        for n in sizes:
            for mesh in meshes(m, n, a):
                tasks.append((chip, n, mesh))
    counter = itertools.count(1)  # thread-safe in CPython
    rows = []
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for res in ex.map(lambda t: search_mesh(a, t[0], t[1], t[2], tmp, counter), tasks):
            rows.extend(res)
    if a.lib is not None:
        a.lib.close()
    for c in chips:
        if "spec" in c:
            os.remove(c["spec"])
    os.rmdir(tmp0)
    if not a.keep:
        try:
            os.rmdir(tmp)
        except OSError:
            pass
    host_s = time.perf_counter() - t0
    mft = gen.model_flops_per_token(m)
    ok, bad = [], []
    for r in rows:
        if r["status"] != "ok":
            bad.append(r)
            continue
        chip = next(c for c in chips if c["name"] == r["chip"])
        r["tokens_per_s"] = m["batch_tokens"] / r["step_s"]
        r["mfu"] = mft * m["batch_tokens"] / (r["step_s"] * r["chips"] * chip["peak"])
        r["tflops_per_chip"] = mft * m["batch_tokens"] / (r["step_s"] * r["chips"]) / 1e12
        price, pstat = price_of(prices, r["chip"], a.pricing)
        r["price_per_chip_hour"], r["price_status"] = price, pstat
        r.update(goodput(a, r, m))
        r["steps"] = math.ceil(m["train_tokens"] / m["batch_tokens"])
        r["cost"] = None if price is None else price * r["chips"] * r["wall_s"] / 3600
        r["usd_per_mtok"] = None if price is None else price * r["chips"] / 3600 / r["tokens_per_s"] * 1e6
        ok.append(r)
    over = []
    keep = []
    for r in ok:
        if a.deadline and r["wall_s"] > a.deadline * 86400:
            over.append((r, "deadline"))
        elif a.budget and r["cost"] is not None and r["cost"] > a.budget:
            over.append((r, "budget"))
        else:
            keep.append(r)
    keep.sort(key=lambda r: (r["cost"] if r["cost"] is not None else float("inf"), r["wall_s"]))
    front = pareto(keep)
    for r in front:
        r["pareto"] = True
    out = {"model": {k: m[k] for k in m}, "params": gen.param_count(m), "model_flops_per_token": mft,
           "pricing": a.pricing, "price_table": {"date": prices.get("date"), "note": prices.get("note")},
           "failure_rate_per_chip_hour": a.failure_rate, "storage_bw_gbps_per_chip": a.storage_bw,
           "evaluated": len(rows), "timed": next(counter) - 1, "host_s": host_s,
           "candidates": keep, "over_limits": [dict(r, limit=w) for r, w in over], "not_fit": bad,
           "pareto": [{"slice": r["slice"], "mesh": mesh_s(r), "wall_s": r["wall_s"], "cost": r["cost"]} for r in front]}
    if a.svg:
        svg.plot(a.svg, keep, front, m["name"], a.pricing)
    if a.json:
        json.dump(finite(out), sys.stdout, indent=1, default=lambda x: None)
        sys.stdout.write("\n")
    else:
        text_report(a, out, keep, over, bad, front)
    return 0 if keep else 1


def main(argv):
    if len(argv) > 0 and argv[0] == "--tpusim":
        tpusim, argv = argv[1], argv[2:]
    else:
        tpusim = os.environ.get("TPUSIM", "tpusim")
    root = os.path.dirname(os.path.dirname(HERE))
    if argv and argv[0] == "buckets":
        return buckets.main(argv[1:])
    if argv and argv[0] == "serve":
        return serve.main(argv[1:], sys.modules[__name__], tpusim, root)
    ap = cmdline.Parser(argv=argv, base=2, prog="tpusim plan", description="Rank chips, slices and shardings for training a "
                                 "transformer by time and cost, from tpusim's timing of each candidate's step.")
    ap.add_argument("model", help="MODEL.json (see docs/plan.md), or PROGRAM.hlo: JAX's lowered sharded step")
    ap.add_argument("--chips", default="v4,v5e,v5p,v6e")
    ap.add_argument("--max-chips", type=int, default=256)
    ap.add_argument("--slice", type=int, help="only this many chips (per slice)")
    ap.add_argument("--slices", type=int, default=1,
                    help="K slices joined by the data-center network, data parallel across them (docs/pod.md)")
    ap.add_argument("--data", type=int, help="only meshes with this data-parallel size")
    ap.add_argument("--fsdp", type=int)
    ap.add_argument("--tensor", type=int)
    ap.add_argument("--max-tensor", type=int, default=16)
    ap.add_argument("--micro", type=int, help="only this many microbatches")
    ap.add_argument("--pipeline", type=int, help="only this many pipeline stages (the layers split over them)")
    ap.add_argument("--max-pipeline", type=int, default=1, help="search pipeline stages up to this (powers of two)")
    ap.add_argument("--dcn-axis", choices=["data", "pipeline"], default="data",
                    help="the mesh axis the --slices split: data parallelism (default) or pipeline stages")
    ap.add_argument("--pipeline-repeats", type=int, default=1,
                    help="circular pipelines: each microbatch goes this many times round the stages")
    ap.add_argument("--pipeline-schedule", choices=["gpipe", "1f1b", "circular"],
                    help="gpipe (default), 1f1b (one SPMD loop of M + 2P - 2 iterations, each a forward and a backward: "
                         "bubble 2(P - 1)/(M + 2P - 2), at most 2P - 1 microbatches' activations held), or "
                         "circular (default with --pipeline-repeats above 1)")
    ap.add_argument("--remat", choices=["off", "on", "both"] + [k for k in gen.REMAT if k not in ("off", "on")],
                    default="both", help="on / off / both, or one of MaxText's remat policies by name (docs/plan.md)")
    ap.add_argument("--budget", type=float, help="USD")
    ap.add_argument("--deadline", type=float, help="days")
    ap.add_argument("--pricing", choices=["on-demand", "spot", "1y", "3y"], default="on-demand")
    ap.add_argument("--failure-rate", type=float, default=0.0, help="failures per chip-hour")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="steps (default: Young/Daly optimum)")
    ap.add_argument("--storage-bw", type=float, default=0.2, help="checkpoint write GB/s per chip")
    ap.add_argument("--restart-min", type=float, default=10.0, help="minutes lost per restart")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--svg")
    ap.add_argument("--ignore-hbm", action="store_true",
                    help="time candidates that do not fit too (listed with the HBM they need; for validation)")
    ap.add_argument("--no-windowed-einsum", action="store_true",
                    help="gather and reduce-scatter FSDP weights where the chip's XLA compiler would pass them "
                         "round a ring (docs/spmd.md)")
    ap.add_argument("--xla-async", choices=["auto", "all", "all-gather"], default="auto",
                    help="the collectives the XLA TPU compiler runs asynchronously: all (MaxText's async collective "
                         "fusion flags, its v5e and v5p scripts), all-gather (--xla_enable_async_all_gather alone, "
                         "MaxText's v4 scripts): the others synchronous where the program places them, and the "
                         "weight gathers not pipelined across layers; auto (the default): as MaxText's scripts for "
                         "the chip (docs/plan.md)")
    ap.add_argument("--exact", action="store_true",
                    help="time every microbatch iteration instead of extrapolating from one and two")
    ap.add_argument("--in-process", action="store_true",
                    help="time the candidates in this process through libtpusim (found beside tpusim or at "
                         "$TPUSIM_LIBRARY; one at a time) instead of `tpusim run` processes, two at a time")
    ap.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tokens-per-step", type=int, help="PROGRAM.hlo: the tokens one step consumes")
    ap.add_argument("--train-tokens", type=float, help="PROGRAM.hlo: the tokens to train on")
    ap.add_argument("--axes", help="PROGRAM.hlo: its mesh axis names (default: the module header's mesh)")
    ap.add_argument("--pin", help="PROGRAM.hlo: AXIS=SIZE,... fixed axis sizes")
    a = ap.parse_args(argv)
    a.tpusim, a.root = tpusim, root
    def bad(k, msg):
        cmdline.arg_fail(argv, 2, "--" + k.replace("_", "-"), msg)
    for k in ("max_chips", "jobs", "slice", "slices", "data", "fsdp", "tensor", "micro", "max_tensor", "pipeline",
              "max_pipeline", "pipeline_repeats"):
        v = getattr(a, k)
        if v is not None and v < 1:
            bad(k, f"--{k.replace('_', '-')} must be at least 1, not {v}")
    if a.pipeline_schedule is None:
        a.pipeline_schedule = "circular" if a.pipeline_repeats > 1 else "gpipe"
    elif (a.pipeline_schedule == "circular") != (a.pipeline_repeats > 1):
        bad("pipeline_schedule", "a circular schedule takes --pipeline-repeats 2 or more, and only it does "
            f"(--pipeline-schedule {a.pipeline_schedule} with --pipeline-repeats {a.pipeline_repeats})")
    if a.jobs > 64:
        bad("jobs", f"--jobs must be at most 64, not {a.jobs}")
    if a.top < 0:
        bad("top", f"--top must be at least 0, not {a.top}")
    for k in ("budget", "deadline", "storage_bw", "train_tokens"):  # positive, finite amounts
        v = getattr(a, k)
        if v is not None and not (math.isfinite(v) and v > 0):
            bad(k, f"--{k.replace('_', '-')} must be a positive number, not {v}")
    for k in ("failure_rate", "restart_min"):
        v = getattr(a, k)
        if not (math.isfinite(v) and v >= 0):
            bad(k, f"--{k.replace('_', '-')} must be a number of at least 0, not {v}")
    if a.checkpoint_every < 0:
        bad("checkpoint_every", f"--checkpoint-every must be at least 0, not {a.checkpoint_every}")
    if a.tokens_per_step is not None and a.tokens_per_step < 1:
        bad("tokens_per_step", f"--tokens-per-step must be at least 1, not {a.tokens_per_step}")
    for c in a.chips.split(","):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+(:core)?", c):
            bad("chips", f"--chips takes chip names separated by commas (v4,v5e,...), not '{a.chips}'")
    for c in a.chips.split(","):
        try:
            load_chip(root, c)
        except InputError as e:
            bad("chips", str(e).replace("error: ", "", 1))
    if a.model.endswith(".hlo"):
        try:
            return hloplan.plan_hlo(a, sys.modules[__name__])
        except (InputError, hloplan.PlanError) as e:
            die(str(e))
    try:
        a.model = load_model(a.model)
        return plan(a)
    except InputError as e:
        die(str(e))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
