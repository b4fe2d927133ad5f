"""Fix-ups of the HLO text JAX lowers, before tpusim loads it (tpusim.simulate, tpusim.jit
and the PJRT plugin's converter share them)."""
import re

# One entry of a module's `xla.sdy.meshes={a = #sdy.mesh<[...]>, b = ...}`; a mesh without
# axes (`#sdy.mesh<[]>`, JAX's `empty_mesh` for arguments it did not shard, such as a Python
# scalar, and maximal meshes with their device_ids) names no devices.
_MESH = re.compile(r'\s*([\w$.-]+|"[^"]*")\s*=\s*#sdy\.mesh<(\[[^\]]*\])(?:,\s*device_ids=\[[^\]]*\])?>\s*')


def drop_empty_meshes(text):
    """The text with the Shardy meshes that have no axes left out of the module header's
    xla.sdy.meshes, so that the mesh tpusim partitions over is the one with the devices (a jit
    over sharded arrays and a Python scalar names both). Unchanged when there is nothing to
    drop or the header has another form."""
    head_end = text.find("\n")
    head = text if head_end < 0 else text[:head_end]
    k = head.find("xla.sdy.meshes={")
    if k < 0:
        return text
    start = k + len("xla.sdy.meshes={")
    depth, j = 1, start
    while j < len(head) and depth:
        depth += {"{": 1, "}": -1}.get(head[j], 0)
        j += 1
    if depth:
        return text
    body = head[start:j - 1]
    entries, pos = [], 0
    while pos < len(body):
        m = _MESH.match(body, pos)
        if not m:
            return text
        entries.append((m.group(0).strip(), m.group(2).strip() != "[]"))
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                return text
            pos += 1
    kept = [e for e, axes in entries if axes]
    if not kept or len(kept) == len(entries):
        return text
    return text[:start] + ", ".join(kept) + text[j - 1:]


# ---- batch-norm-training / -inference / -grad, expanded as XLA's BatchNormExpander does ----

_BN = re.compile(r"^(\s*)(ROOT\s+)?(\S+)\s*=\s*(.*?)\s+(batch-norm-training|batch-norm-inference|batch-norm-grad)"
                 r"\(([^()]*)\)(.*)$")
_ARRAY = re.compile(r"([a-z0-9]+)\[([\d,\s]*)\]")


def _bn_lines(kind, name, root, ind, dt, dims, f, eps, args, meta):
    """The instructions that compute one batch-norm op, the last named `name`."""
    r = len(dims)
    c = dims[f]
    n = 1
    for k, d in enumerate(dims):
        if k != f:
            n *= d
    D = "%s[%s]" % (dt, ",".join(str(d) for d in dims))
    C = "%s[%d]" % (dt, c)
    S = "%s[]" % dt
    red = "dimensions={%s}, to_apply=tpusim_bn_add_%s" % (",".join(str(k) for k in range(r) if k != f), dt)
    fdim = "dimensions={%d}" % f
    p = name + ".bn."
    out = []

    def emit(local, typ, expr):
        out.append("%s%s%s = %s %s%s" % (ind, "", p + local, typ, expr, meta))
        return p + local

    zero = emit("zero", S, "constant(0)")
    epsb = emit("epsb", C, "broadcast(%s), dimensions={}" % emit("eps", S, "constant(%r)" % eps))
    x = args[0]
    if kind == "batch-norm-training":
        _, scale, offset = args
        nb = emit("nb", C, "broadcast(%s), dimensions={}" % emit("n", S, "constant(%d)" % n))
        mean = emit("mean", C, "divide(%s, %s)" % (emit("sum", C, "reduce(%s, %s), %s" % (x, zero, red)), nb))
        sq = emit("sq", D, "multiply(%s, %s)" % (x, x))
        meansq = emit("meansq", C, "divide(%s, %s)" % (emit("sumsq", C, "reduce(%s, %s), %s" % (sq, zero, red)), nb))
        var = emit("var", C, "subtract(%s, %s)" % (meansq, emit("mean2", C, "multiply(%s, %s)" % (mean, mean))))
    elif kind == "batch-norm-inference":
        _, scale, offset, mean, var = args
    else:
        _, scale, mean, var, dy = args
    rs = emit("rs", C, "rsqrt(%s)" % emit("vpe", C, "add(%s, %s)" % (var, epsb)))
    xc = emit("xc", D, "subtract(%s, %s)" % (x, emit("meanb", D, "broadcast(%s), %s" % (mean, fdim))))
    if kind != "batch-norm-grad":
        sr = emit("srb", D, "broadcast(%s), %s" % (emit("sr", C, "multiply(%s, %s)" % (scale, rs)), fdim))
        y0 = emit("y0", D, "multiply(%s, %s)" % (xc, sr))
        y = emit("y", D, "add(%s, %s)" % (y0, emit("offb", D, "broadcast(%s), %s" % (offset, fdim))))
        last = ("(%s, %s, %s) tuple(%s, %s, %s)" % (D, C, C, y, mean, var) if kind == "batch-norm-training"
                else "%s copy(%s)" % (D, y))
    else:
        # dx = scale·rs/N · (N·dy - Σdy - (x-μ)·rs²·Σ(dy·(x-μ))), dscale = rs·Σ(dy·(x-μ)), doffset = Σdy
        dbeta = emit("dbeta", C, "reduce(%s, %s), %s" % (dy, zero, red))
        sdxm = emit("sdxm", C, "reduce(%s, %s), %s" % (emit("dyxc", D, "multiply(%s, %s)" % (dy, xc)), zero, red))
        dgamma = emit("dgamma", C, "multiply(%s, %s)" % (sdxm, rs))
        nb = emit("nb", C, "broadcast(%s), dimensions={}" % emit("n", S, "constant(%d)" % n))
        rs2 = emit("rs2", C, "multiply(%s, %s)" % (rs, rs))
        t1 = emit("ndy", D, "multiply(%s, %s)" % (dy, emit("nbd", D, "broadcast(%s), %s" % (nb, fdim))))
        t2 = emit("t2", D, "subtract(%s, %s)" % (t1, emit("dbetab", D, "broadcast(%s), %s" % (dbeta, fdim))))
        k3 = emit("k3", C, "multiply(%s, %s)" % (rs2, sdxm))
        t3 = emit("t3", D, "multiply(%s, %s)" % (xc, emit("k3b", D, "broadcast(%s), %s" % (k3, fdim))))
        t4 = emit("t4", D, "subtract(%s, %s)" % (t2, t3))
        coef = emit("coef", C, "divide(%s, %s)" % (emit("srs", C, "multiply(%s, %s)" % (scale, rs)), nb))
        dx = emit("dx", D, "multiply(%s, %s)" % (t4, emit("coefb", D, "broadcast(%s), %s" % (coef, fdim))))
        last = "(%s, %s, %s) tuple(%s, %s, %s)" % (D, C, C, dx, dgamma, dbeta)
    out.append("%s%s%s = %s%s" % (ind, root or "", name, last, meta))
    return out


def expand_batch_norm(text):
    """The HLO text with every batch-norm-training, batch-norm-inference and batch-norm-grad
    (PyTorch/XLA's batch norm and layer norm) written as the reductions and elementwise ops
    XLA's BatchNormExpander turns them into before a TPU runs them: mean = Σx/N, var =
    Σx²/N - mean² over every dimension but feature_index, y = (x - mean)·scale·rsqrt(var + ε)
    + offset, and the gradient formula above. Unchanged when there is none."""
    if "batch-norm-" not in text:
        return text
    lines = text.split("\n")
    out, types = [], set()
    for line in lines:
        m = _BN.match(line)
        if not m:
            out.append(line)
            continue
        ind, root, name, typ, kind, args, rest = m.groups()
        attrs = dict(re.findall(r"(epsilon|feature_index)=([^,\s]+)", rest))
        arrays = _ARRAY.findall(typ)
        if not arrays or "feature_index" not in attrs:
            out.append(line)
            continue
        dt = arrays[0][0]
        dims = [int(d) for d in arrays[0][1].replace(" ", "").split(",") if d]
        meta = re.search(r",\s*metadata=\{[^{}]*\}", rest)
        types.add(dt)
        out += _bn_lines(kind, name, root, ind, dt, dims, int(attrs["feature_index"]),
                         float(attrs.get("epsilon", "0")), [a.strip() for a in args.split(",")],
                         meta.group(0) if meta else "")
    adds = []
    for dt in sorted(types):
        adds += ["tpusim_bn_add_%s {" % dt, "  x = %s[] parameter(0)" % dt, "  y = %s[] parameter(1)" % dt,
                 "  ROOT s = %s[] add(x, y)" % dt, "}", ""]
    # before the first computation (after the header and any metadata tables)
    for i, line in enumerate(out):
        if re.match(r"^(ENTRY\s+)?[^\s{}]+\s.*\{\s*$|^[^\s{}]+\s*\{\s*$", line) and not line.startswith("HloModule"):
            return "\n".join(out[:i] + adds + out[i:])
    return "\n".join(out)


# ---- float8 ----

# (mantissa bits, exponent bias, largest finite value) of each float8 type tpusim runs.
F8_TYPES = {"f8e4m3fn": (3, 7, 448.0), "f8e5m2": (2, 15, 57344.0)}
_F8_RE = re.compile(r"\b(f8e4m3fn|f8e5m2)\[")
_INSTR = re.compile(r"^(\s*)(ROOT\s+)?([^\s=]+)\s*=\s*((?:f8e4m3fn|f8e5m2)\[[^\]]*\](?:\{[^}]*\})?)\s+([\w-]+)\((.*)$")
# Ops whose results are values of their f8 operands: nothing to round.
_MOVES = {"parameter", "constant", "get-tuple-element", "tuple", "reshape", "transpose", "broadcast", "copy", "slice",
          "dynamic-slice", "dynamic-update-slice", "concatenate", "reverse", "pad", "select", "gather", "bitcast",
          "all-gather", "all-to-all", "collective-permute", "copy-start", "copy-done"}


def _f8_round(ind, root, name, dims, kind, meta):
    """Lines rounding the f32 value `name.f8` to the float8 grid of `kind`, as ml_dtypes does
    (nearest even; subnormals; F8E4M3FN's overflow and infinities to NaN, F8E5M2's overflow to
    infinity), the last one named `name`."""
    mb, bias, top = F8_TYPES[kind]
    k = bias - 1 + mb  # subnormals are multiples of 2^-k
    T, P, S = "f32[%s]" % dims, "pred[%s]" % dims, "f32[]"
    x, p = name + ".f8", name + ".f8"
    out = []

    def emit(local, typ, expr):
        out.append("%s%s = %s %s%s" % (ind, p + local, typ, expr, meta))
        return p + local

    def const(local, v):
        return emit(local, T, "broadcast(%s), dimensions={}" % emit(local + "c", S, "constant(%s)" % v))

    ax = emit("abs", T, "abs(%s)" % x)
    normal = emit("rp", T, "reduce-precision(%s), exponent_bits=8, mantissa_bits=%d" % (x, mb))
    scaled = emit("up", T, "multiply(%s, %s)" % (x, const("k", repr(float(2 ** k)))))
    sub = emit("sub", T, "multiply(%s, %s)" % (emit("rne", T, "round-nearest-even(%s)" % scaled),
                                               const("ik", repr(float(2.0 ** -k)))))
    tiny = emit("tiny", P, "compare(%s, %s), direction=LT" % (ax, const("min", repr(float(2.0 ** (1 - bias))))))
    r = emit("r", T, "select(%s, %s, %s)" % (tiny, sub, normal))
    big = emit("big", P, "compare(%s, %s), direction=GT" % (emit("ra", T, "abs(%s)" % r), const("max", repr(top))))
    if kind == "f8e4m3fn":  # NaN with the sign of the value, as ml_dtypes gives it
        nan = const("nan", "nan")
        neg = emit("neg", P, "compare(%s, %s), direction=LT" % (r, const("zero", "0")))
        over = emit("snan", T, "select(%s, %s, %s)" % (neg, emit("nnan", T, "negate(%s)" % nan), nan))
    else:
        over = emit("inf", T, "multiply(%s, %s)" % (emit("sg", T, "sign(%s)" % r), const("infb", "inf")))
    out.append("%s%s%s = %s select(%s, %s, %s)%s" % (ind, root or "", name, T, big, over, r, meta))
    return out


def f8_as_f32(text):
    """The HLO text with its float8 arrays (f8e4m3fn, f8e5m2) computed as f32: every f8 type
    becomes f32, and each instruction that computes new f8 values (a convert, arithmetic, a
    reduction's combiner) is followed by its rounding to the f8 grid, so the values are those of
    ml_dtypes and XLA (which computes f8 arithmetic in f32 and rounds each result). The PJRT
    plugin widens and narrows the buffers. Unchanged without float8."""
    if not _F8_RE.search(text):
        return text
    out = []
    for line in text.split("\n"):
        m = _INSTR.match(line)
        if m and "bitcast-convert" == m.group(5):
            raise NotImplementedError("bitcast-convert to or from a float8 type")
        if m and m.group(5) not in _MOVES:
            ind, root, name, typ, op, rest = m.groups()
            kind = typ.split("[")[0]
            dims = typ[typ.index("[") + 1:typ.index("]")]
            meta = re.search(r",\s*metadata=\{[^{}]*\}", rest)
            out.append("%s%s.f8 = %s %s(%s" % (ind, name, typ, op, rest))
            out += _f8_round(ind, root, name, dims, kind, meta.group(0) if meta else "")
        else:
            if "bitcast-convert" in line and _F8_RE.search(line):
                raise NotImplementedError("bitcast-convert to or from a float8 type")
            out.append(line)
    return _F8_RE.sub("f32[", "\n".join(out))
