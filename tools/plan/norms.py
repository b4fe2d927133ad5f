"""The non-matmul work of a decoder layer besides attention's softmax and the MLP's activation,
as MaxText's decoder runs it (tools/plan/gen.py calls these; docs/plan.md, "Norms and rotary
embeddings"):

  - RMSNorm of the residual before the matmuls that read it (model "norm": "rms", the
    default): each row's mean square, in f32, from the chip's columns of the residual (all of
    them with no tensor axis; MaxText keeps the residual split over tensor, so each chip sums
    its D/T columns and the sums are all-reduced over tensor), and the row's rsqrt scaling the
    residual where the matmuls read it (XLA fuses an elementwise producer into the dot's
    kernel, tpusim too). Its backward, on the gradient of the normalised input (split over
    tensor as the reduce-scatter left it): a second row sum (of gradient times input) and the
    elementwise gradient. The norm's scale parameter is left out (its gradient is one more
    column sum).
  - Rotary position embeddings on q and k (model "position": "rope", the default):
    q cos + rotate_half(q) sin with the angle tables of the positions, one elementwise pass
    over q and k, and its transpose on their gradients.
  - MaxText's QK normalisation of 2023 (model "qk_norm": "qk", its decoder of 2023-04, or
    "qkv", 2023-12): RMSNorm of each head's q and k (and v) over head_dim after the rotary
    embedding (no collective: a head is on one chip).

Values are the functions' own (the gradients are exact, with the norm's scale 1)."""

EPS = "1e-06"  # MaxText's RMSNorm epsilon


def _ty(dt, shape):
    return f"{dt}[{','.join(str(x) for x in shape)}]"


def _row_scale(st, g, out, src, shape, red, n, tp):
    """out.r, f32 of shape without dim red: rsqrt(sum over red of src^2 / n + eps), the sum
    all-reduced over tensor when tp (the chip holds 1/T of the row)."""
    rs = tuple(x for i, x in enumerate(shape) if i != red)
    g.e(f"{out}.f = {_ty('f32', shape)} convert({src})")
    g.e(f"{out}.q = {_ty('f32', shape)} multiply({out}.f, {out}.f)")
    g.e(f"{out}.z = f32[] constant(0)")
    g.e(f"{out}.p = {_ty('f32', rs)} reduce({out}.q, {out}.z), dimensions={{{red}}}, to_apply=add_f32")
    ss = f"{out}.p"
    if tp and st.T > 1:
        st.ar(g, f"{out}.ss", ss, rs, st.g_tp, st.T, dt="f32")
        ss = f"{out}.ss"
    g.e(f"{out}.n = f32[] constant({1.0 / n!r})")
    g.e(f"{out}.nb = {_ty('f32', rs)} broadcast({out}.n), dimensions={{}}")
    g.e(f"{out}.e = f32[] constant({EPS})")
    g.e(f"{out}.eb = {_ty('f32', rs)} broadcast({out}.e), dimensions={{}}")
    g.e(f"{out}.m = {_ty('f32', rs)} multiply({ss}, {out}.nb)")
    g.e(f"{out}.me = {_ty('f32', rs)} add({out}.m, {out}.eb)")
    g.e(f"{out}.r = {_ty('f32', rs)} rsqrt({out}.me)")
    return f"{out}.r"


def _cols(st, g, out, x):
    """This chip's D/T columns of the gathered residual x [Tm, D] (x itself when T = 1)."""
    if st.T == 1:
        return x, (st.Tm, st.D)
    Dr = st.D // st.T
    g.e(f"{out}.c = {_ty(st.cd, (st.Tm, Dr))} slice({x}), slice={{[0:{st.Tm}], [0:{Dr}]}}")
    return f"{out}.c", (st.Tm, Dr)


def _scale(st, g, out, x, r, shape, red):
    """out = x * r broadcast over dim red (r f32, without dim red)."""
    keep = tuple(i for i in range(len(shape)) if i != red)
    g.e(f"{out}.rc = {_ty(st.cd, tuple(shape[i] for i in keep))} convert({r})")
    g.e(f"{out}.rb = {_ty(st.cd, shape)} broadcast({out}.rc), dimensions={{{','.join(map(str, keep))}}}")
    g.e(f"{out} = {_ty(st.cd, shape)} multiply({x}, {out}.rb)")


def residual_norm(st, g, out, x):
    """RMSNorm of the gathered residual x [Tm, D] as out [Tm, D] (the matmuls' input); returns
    the row scale's name (f32 [Tm]) for the backward."""
    c, shape = _cols(st, g, out, x)
    r = _row_scale(st, g, out, c, shape, 1, st.D, True)
    _scale(st, g, out, x, r, (st.Tm, st.D), 1)
    return r


def residual_norm_bwd(st, g, out, gn, x, r):
    """The gradient of the residual through its RMSNorm: gn the gradient of the normalised
    input, this chip's columns ([Tm, D/T], [Tm, D] when T = 1), x the gathered residual [Tm, D],
    r its row scale. gx = r gn - x r^3 mean(gn x) (the mean's sum all-reduced over tensor)."""
    c, shape = _cols(st, g, out, x)
    Tm = st.Tm
    g.e(f"{out}.gf = {_ty('f32', shape)} convert({gn})")
    g.e(f"{out}.xf = {_ty('f32', shape)} convert({c})")
    g.e(f"{out}.gx = {_ty('f32', shape)} multiply({out}.gf, {out}.xf)")
    g.e(f"{out}.z = f32[] constant(0)")
    g.e(f"{out}.p = f32[{Tm}] reduce({out}.gx, {out}.z), dimensions={{1}}, to_apply=add_f32")
    s = f"{out}.p"
    if st.T > 1:
        st.ar(g, f"{out}.s", s, (Tm,), st.g_tp, st.T, dt="f32")
        s = f"{out}.s"
    g.e(f"{out}.n = f32[] constant({1.0 / st.D!r})")
    g.e(f"{out}.nb = f32[{Tm}] broadcast({out}.n), dimensions={{}}")
    g.e(f"{out}.r2 = f32[{Tm}] multiply({r}, {r})")
    g.e(f"{out}.r3 = f32[{Tm}] multiply({out}.r2, {r})")
    g.e(f"{out}.k0 = f32[{Tm}] multiply({s}, {out}.nb)")
    g.e(f"{out}.k = f32[{Tm}] multiply({out}.k0, {out}.r3)")
    g.e(f"{out}.rb = {_ty('f32', shape)} broadcast({r}), dimensions={{0}}")
    g.e(f"{out}.kb = {_ty('f32', shape)} broadcast({out}.k), dimensions={{0}}")
    g.e(f"{out}.a = {_ty('f32', shape)} multiply({out}.gf, {out}.rb)")
    g.e(f"{out}.b = {_ty('f32', shape)} multiply({out}.xf, {out}.kb)")
    g.e(f"{out}.d = {_ty('f32', shape)} subtract({out}.a, {out}.b)")
    g.e(f"{out} = {_ty(st.cd, shape)} convert({out}.d)")


def _tables(st, g, out, S, hd):
    """cos and sin of the rotary angles, f32 [S, hd]: position s, frequency pair i (the two
    halves of head_dim share them), angle s / 10000^(2i/hd)."""
    half = hd // 2
    g.e(f"{out}.ps = f32[{S},{half}] iota(), iota_dimension=0")
    g.e(f"{out}.pi = f32[{S},{half}] iota(), iota_dimension=1")
    g.e(f"{out}.ex = f32[] constant({-2.0 / hd * 9.210340371976184!r})")  # -2 ln(10000) / hd
    g.e(f"{out}.exb = f32[{S},{half}] broadcast({out}.ex), dimensions={{}}")
    g.e(f"{out}.lf = f32[{S},{half}] multiply({out}.pi, {out}.exb)")
    g.e(f"{out}.fr = f32[{S},{half}] exponential({out}.lf)")
    g.e(f"{out}.an = f32[{S},{half}] multiply({out}.ps, {out}.fr)")
    g.e(f"{out}.a2 = f32[{S},{hd}] concatenate({out}.an, {out}.an), dimensions={{1}}")
    g.e(f"{out}.cos = f32[{S},{hd}] cosine({out}.a2)")
    g.e(f"{out}.sin = f32[{S},{hd}] sine({out}.a2)")
    return f"{out}.cos", f"{out}.sin"


def rope(st, g, out, x, shape, grad=False):
    """Rotary embedding of x [b, S, heads, hd] as out: x cos + rotate_half(x) sin, with
    rotate_half(x) = [-x2, x1]; grad: its transpose on a gradient, x cos + [x2, -x1] sin."""
    cd = st.cd
    b, S, h, hd = shape
    half = hd // 2
    cos, sin = _tables(st, g, out, S, hd)
    g.e(f"{out}.cc = {_ty(cd, (S, hd))} convert({cos})")
    g.e(f"{out}.sc = {_ty(cd, (S, hd))} convert({sin})")
    g.e(f"{out}.cb = {_ty(cd, shape)} broadcast({out}.cc), dimensions={{1,3}}")
    g.e(f"{out}.sb = {_ty(cd, shape)} broadcast({out}.sc), dimensions={{1,3}}")
    hs = (b, S, h, half)
    g.e(f"{out}.x1 = {_ty(cd, hs)} slice({x}), slice={{[0:{b}], [0:{S}], [0:{h}], [0:{half}]}}")
    g.e(f"{out}.x2 = {_ty(cd, hs)} slice({x}), slice={{[0:{b}], [0:{S}], [0:{h}], [{half}:{hd}]}}")
    if grad:
        g.e(f"{out}.n1 = {_ty(cd, hs)} negate({out}.x1)")
        g.e(f"{out}.rt = {_ty(cd, shape)} concatenate({out}.x2, {out}.n1), dimensions={{3}}")
    else:
        g.e(f"{out}.n2 = {_ty(cd, hs)} negate({out}.x2)")
        g.e(f"{out}.rt = {_ty(cd, shape)} concatenate({out}.n2, {out}.x1), dimensions={{3}}")
    g.e(f"{out}.xc = {_ty(cd, shape)} multiply({x}, {out}.cb)")
    g.e(f"{out}.rs = {_ty(cd, shape)} multiply({out}.rt, {out}.sb)")
    g.e(f"{out} = {_ty(cd, shape)} add({out}.xc, {out}.rs)")


def head_norm(st, g, out, x, shape):
    """RMSNorm of each head of x [b, S, heads, hd] over hd as out; returns the row scale."""
    r = _row_scale(st, g, out, x, shape, 3, shape[3], False)
    _scale(st, g, out, x, r, shape, 3)
    return r


def head_norm_bwd(st, g, out, gn, x, r, shape):
    """The gradient through head_norm: gn that of its output, x its input, r its row scale."""
    rs = shape[:3]
    g.e(f"{out}.gf = {_ty('f32', shape)} convert({gn})")
    g.e(f"{out}.xf = {_ty('f32', shape)} convert({x})")
    g.e(f"{out}.gx = {_ty('f32', shape)} multiply({out}.gf, {out}.xf)")
    g.e(f"{out}.z = f32[] constant(0)")
    g.e(f"{out}.p = {_ty('f32', rs)} reduce({out}.gx, {out}.z), dimensions={{3}}, to_apply=add_f32")
    g.e(f"{out}.n = f32[] constant({1.0 / shape[3]!r})")
    g.e(f"{out}.nb = {_ty('f32', rs)} broadcast({out}.n), dimensions={{}}")
    g.e(f"{out}.r2 = {_ty('f32', rs)} multiply({r}, {r})")
    g.e(f"{out}.r3 = {_ty('f32', rs)} multiply({out}.r2, {r})")
    g.e(f"{out}.k0 = {_ty('f32', rs)} multiply({out}.p, {out}.nb)")
    g.e(f"{out}.k = {_ty('f32', rs)} multiply({out}.k0, {out}.r3)")
    g.e(f"{out}.rb = {_ty('f32', shape)} broadcast({r}), dimensions={{0,1,2}}")
    g.e(f"{out}.kb = {_ty('f32', shape)} broadcast({out}.k), dimensions={{0,1,2}}")
    g.e(f"{out}.a = {_ty('f32', shape)} multiply({out}.gf, {out}.rb)")
    g.e(f"{out}.b = {_ty('f32', shape)} multiply({out}.xf, {out}.kb)")
    g.e(f"{out}.d = {_ty('f32', shape)} subtract({out}.a, {out}.b)")
    g.e(f"{out} = {_ty(st.cd, shape)} convert({out}.d)")
