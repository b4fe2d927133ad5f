"""Lowering as for a TPU: the rules JAX registers for the "tpu" platform, registered for
"tpusim" too, so that a program lowered for tpusim is the program JAX lowers for a TPU; and
HLO-level expansions of the TPU custom calls those rules emit that tpusim would otherwise not
run (docs/pjrt.md, "Lowering").

Copied from the "tpu" rules: eigh (QDWH, pure JAX), dot_general, the all-gathers, device_put
(memory kinds). Kept at JAX's default instead, because the TPU rule emits a custom call that
only XLA's TPU compiler expands and tpusim has no expansion for: lu ("LuDecomposition"; the
default is the same blocked algorithm in JAX), approx_top_k ("ApproxTopK"; the default is the
exact sort-based top-k), empty ("AllocateBuffer"; the default is a zero broadcast). Host
callbacks (jax.debug.print, jax.debug.callback, pure_callback, io_callback; send/recv on a
TPU) become the custom call JAX emits for them on a CPU ("xla_ffi_python_cpu_callback"), whose
index numbers the callback in this process (host_callbacks.py); the executors hand it the
operands and take its results.

Expanded here: eigh's Jacobi variant (custom call "Eigh", what the TPU rule emits for
matrices up to 256 wide), geqrf (custom call "Qr") and householder_product
("ProductOfElementaryHouseholderReflectors"), as XLA's QrExpander does: Householder
reflections column by column with LAPACK's conventions (dlarfg's beta = -sign(alpha)·‖x‖,
tau = (beta - alpha) / beta, v = x / (alpha - beta) with v₀ = 1), in a loop over the columns
(XLA blocks 128 columns at a time; the reflections are the same). Real types only; complex
ones are refused with a message. jnp.linalg.qr, svd, norm(ord=2), lstsq, pinv and eigh are
built on these.
"""
import numpy as np

PLATFORM = "tpusim"
_COPY = ("eigh", "dot_general", "all_gather", "all_gather_invariant", "all_gather_reduced", "all_gather_start",
         "all_gather_reduced_start", "device_put")
_done = False


def _geqrf_impl(a):
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape[-2:]
    rows = lax.broadcasted_iota(np.int32, (m,), 0)
    cols = lax.broadcasted_iota(np.int32, (n,), 0)
    k = min(m, n)
    taus = jnp.zeros(a.shape[:-2] + (k,), a.dtype)

    def body(j, carry):
        a, taus = carry
        col = jnp.sum(jnp.where(cols == j, a, 0), axis=-1)  # a[..., :, j]
        alpha = jnp.sum(jnp.where(rows == j, col, 0), axis=-1)
        x = jnp.where(rows > j, col, 0)
        xnorm = jnp.sqrt(jnp.sum(x * x, axis=-1))
        reflect = xnorm > 0
        beta = -jnp.copysign(jnp.hypot(alpha, xnorm), alpha)
        tau = jnp.where(reflect, (beta - alpha) / jnp.where(reflect, beta, 1), 0)
        scale = jnp.where(reflect, alpha - beta, 1)
        v = jnp.where(rows == j, 1, jnp.where(rows > j, x / scale[..., None], 0)).astype(a.dtype)
        # H = I - tau v vᵀ applied to the columns right of j; column j becomes (R, beta, v)
        w = jnp.einsum("...m,...mn->...n", v, a, precision=lax.Precision.HIGHEST)
        upd = a - tau[..., None, None] * v[..., :, None] * w[..., None, :]
        newcol = jnp.where(rows < j, col, jnp.where(rows == j, jnp.where(reflect, beta, alpha)[..., None], v))
        a = jnp.where(cols > j, upd, jnp.where(cols == j, newcol[..., :, None], a))
        taus = jnp.where(lax.broadcasted_iota(np.int32, (k,), 0) == j, tau[..., None], taus)
        return a, taus

    return lax.fori_loop(0, k, body, (a, taus))


def _householder_product_impl(a, taus):
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape[-2:]
    k = taus.shape[-1]
    rows = lax.broadcasted_iota(np.int32, (m,), 0)
    cols = lax.broadcasted_iota(np.int32, (n,), 0)
    q = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)

    def body(i, q):  # Q = H_0 H_1 ... H_{k-1} I: apply H_{k-1} first
        j = k - 1 - i
        col = jnp.sum(jnp.where(cols == j, a, 0), axis=-1)
        v = jnp.where(rows == j, 1, jnp.where(rows > j, col, 0)).astype(a.dtype)
        tau = jnp.sum(jnp.where(lax.broadcasted_iota(np.int32, (k,), 0) == j, taus, 0), axis=-1)
        w = jnp.einsum("...m,...mn->...n", v, q, precision=lax.Precision.HIGHEST)
        return q - tau[..., None, None] * v[..., :, None] * w[..., None, :]

    return lax.fori_loop(0, k, body, q)


def _round_robin(n):
    """The n-1 steps of a round-robin tournament over n (even) indices: (top, bottom) arrays of
    n/2 disjoint pairs per step, every pair once (the parallel Jacobi ordering)."""
    top, bot = list(range(0, n, 2)), list(range(1, n, 2))
    tops, bots = [], []
    for _ in range(n - 1):
        tops.append(list(top))
        bots.append(list(bot))
        # the first index stays; the others move one place round the ring
        ring = top[1:] + bot[::-1]
        ring = ring[-1:] + ring[:-1]
        top = [top[0]] + ring[:len(top) - 1]
        bot = ring[len(top) - 1:][::-1]
    return np.array(tops, np.int32), np.array(bots, np.int32)


def _eigh_jacobi_impl(x, *, lower, sort_eigenvalues, subset_by_index=None, max_sweeps=100, tol=1e-6):
    """Eigenvectors and eigenvalues of the symmetric matrices x [..., n, n] (from their lower or
    upper triangle), as XLA's TPU compiler expands the "Eigh" custom call: cyclic Jacobi
    sweeps, n/2 disjoint rotations at a time in round-robin order, until the off-diagonal norm
    is at most tol times the norm (or max_sweeps sweeps; the TPU rule's backend config is
    "lower,sort,100,1e-6"). A rotation zeroes a[p,q] with t = sign(θ) / (|θ| + sqrt(θ² + 1)),
    θ = (a[q,q] - a[p,p]) / (2 a[p,q]). Odd n is padded by one index no rotation touches."""
    import jax.numpy as jnp
    from jax import lax

    n = x.shape[-1]
    hp = lax.Precision.HIGHEST
    tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    a = jnp.where(tri, x, jnp.swapaxes(x, -1, -2))
    m = n + (n % 2)
    if m != n:
        pad = [(0, 0)] * (a.ndim - 2) + [(0, 1), (0, 1)]
        a = jnp.pad(a, pad)
    tops, bots = _round_robin(m) if m > 1 else (np.zeros((0, 0), np.int32),) * 2
    iota = np.arange(m, dtype=np.int32)
    v = jnp.broadcast_to(jnp.eye(m, dtype=a.dtype), a.shape)
    eye = np.eye(m, dtype=bool)

    def step(k, av):
        a, v = av
        top = lax.dynamic_index_in_dim(jnp.asarray(tops), k, keepdims=False)
        bot = lax.dynamic_index_in_dim(jnp.asarray(bots), k, keepdims=False)
        P = (top[:, None] == iota[None, :]).astype(a.dtype)  # [m/2, m] one-hot rows
        Q = (bot[:, None] == iota[None, :]).astype(a.dtype)
        diag = jnp.diagonal(a, axis1=-2, axis2=-1)
        app = jnp.einsum("...m,km->...k", diag, P, precision=hp)
        aqq = jnp.einsum("...m,km->...k", diag, Q, precision=hp)
        apq = jnp.einsum("km,...mn,kn->...k", P, a, Q, precision=hp)
        rotate = apq != 0
        theta = (aqq - app) / jnp.where(rotate, 2 * apq, 1)
        t = jnp.where(rotate, jnp.sign(theta) / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1)), 0)
        t = jnp.where(rotate & (theta == 0), 1, t)
        c = 1 / jnp.sqrt(t * t + 1)
        s = t * c
        # J[p,p] = J[q,q] = c, J[p,q] = s, J[q,p] = -s; A <- Jᵀ A J, V <- V J
        J = (jnp.einsum("km,...k,kn->...mn", P, c, P) + jnp.einsum("km,...k,kn->...mn", Q, c, Q) +
             jnp.einsum("km,...k,kn->...mn", P, s, Q) - jnp.einsum("km,...k,kn->...mn", Q, s, P))
        a = jnp.einsum("...mi,...mn,...nj->...ij", J, a, J, precision=hp)
        v = jnp.einsum("...mn,...nj->...mj", v, J, precision=hp)
        return a, v

    def off(a):
        return jnp.sqrt(jnp.sum(jnp.where(eye, 0, a * a)))

    norm = jnp.sqrt(jnp.sum(a * a))

    def cond(state):
        sweep, a, _ = state
        return (sweep < max_sweeps) & (off(a) > tol * norm)

    def sweep(state):
        k, a, v = state
        a, v = lax.fori_loop(0, m - 1, step, (a, v))
        return k + 1, a, v

    if m > 1:
        _, a, v = lax.while_loop(cond, sweep, (0, a, v))
    w = jnp.diagonal(a, axis1=-2, axis2=-1)[..., :n]
    v = v[..., :n, :n]
    if sort_eigenvalues:
        order = jnp.argsort(w, axis=-1)
        w = jnp.take_along_axis(w, order, axis=-1)
        v = jnp.take_along_axis(v, order[..., None, :], axis=-1)
    return v, w


def _real_only(name, fn, multiple_results):
    from jax._src.interpreters import mlir

    lowered = mlir.lower_fun(fn, multiple_results=multiple_results)

    def rule(ctx, *args, **kw):
        if any(np.issubdtype(np.dtype(av.dtype), np.complexfloating) for av in ctx.avals_in):
            raise NotImplementedError("tpusim: %s of complex matrices (XLA's TPU custom call has no expansion in "
                                      "tpusim for complex types)" % name)
        return lowered(ctx, *args, **kw)

    return rule


def _host_callback_rule(prim):
    """The lowering of a host-callback primitive for tpusim: a side-effecting custom call
    "xla_ffi_python_cpu_callback" numbered by host_callbacks.register (ordered effects thread their
    token through it, as JAX's own lowering does)."""
    from jax._src import callback, debugging, effects
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    from . import host_callbacks

    def rule(ctx, *args, **params):
        if params.get("partitioned"):
            raise NotImplementedError("tpusim: a partitioned jax.debug.callback (called on each shard) is not "
                                      "supported; drop partitioned=True")
        effect = None
        if prim is callback.io_callback_p and params.get("ordered"):
            effect = callback._OrderedIOEffect
        elif prim is debugging.debug_callback_p and effects.ordered_effects.contains(params["effect"]):
            effect = params["effect"]
        elif prim is debugging.debug_print_p and params.get("ordered"):
            effect = debugging.ordered_debug_effect
        token = ctx.tokens_in.get(effect) if effect is not None else None
        number = host_callbacks.register(prim, params, ctx.avals_in, ctx.avals_out)
        types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
        operands = list(args)
        # Where it runs, as JAX places callbacks: once, on device 0 (or the device a pure_callback's
        # sharding names), in an automatically partitioned program; on every device in shard_map.
        placed = callback._callback_op_sharding(ctx.module_context.axis_context, params.get("sharding"),
                                                ctx.avals_out)
        sdy = getattr(placed, "shardings", None)  # Shardy: one per result (at least one)
        if token is not None or (not types and sdy):  # no results: a token carries the placement
            types = [hlo.TokenType.get()] + types
            if token is not None:
                operands = [token] + operands
            if sdy is not None and len(sdy) < len(types):
                placed = type(placed)((type(sdy[0])(mesh_shape=(), dim_shardings=(),
                                                     logical_device_ids=sdy[0].logical_device_ids),) + tuple(sdy))
        side = prim is not callback.pure_callback_p
        # JAX's own form of a CPU callback (XLA keeps its placement through sharding
        # propagation); the index is this process's number for it (host_callbacks.py).
        index = ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), number)
        op = mlir.custom_call("xla_ffi_python_cpu_callback", result_types=types, operands=operands,
                              backend_config={"index": index}, has_side_effect=side, api_version=4)
        if placed is not None:
            mlir.set_sharding(ctx.module_context, op, placed)
        results = list(op.results)
        if len(results) > len(ctx.avals_out):
            first, *results = results
            if token is not None:
                ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: first})))
        return results

    return rule


def _register_pallas(mlir):
    """pallas_call lowers as for a TPU (a tpu_custom_call holding the Mosaic kernel, which the
    converter decodes for libtpusim: tpusim.pallas_decode); interpret mode stays as it is."""
    try:
        from jax._src.pallas import pallas_call as pc
    except ImportError:  # a JAX without Pallas
        return

    def rule(ctx, *args, **params):
        return pc._pallas_call_lowering(ctx.replace(platforms=("tpu",)), *args, **params)
    mlir.register_lowering(pc.pallas_call_p, rule, platform=PLATFORM)


def register():
    """Registers the rules above for the tpusim platform (once)."""
    global _done
    if _done:
        return
    _done = True
    import jax._src.tpu.linalg  # noqa: F401 - registers eigh's TPU rule and the TPU svd rule
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg as lax_linalg

    tpu = mlir._platform_specific_lowerings["tpu"]
    for prim, entry in list(tpu.items()):
        if prim.name in _COPY:
            mlir.register_lowering(prim, entry.rule, platform=PLATFORM, inline=entry.inline)
    eigh_rule = tpu.get(lax_linalg.eigh_p)
    if eigh_rule is not None:
        jacobi = _real_only("eigh", _eigh_jacobi_impl, True)

        def eigh(ctx, operand, *, algorithm, **kw):
            if algorithm == lax_linalg.EighImplementation.JACOBI:  # the TPU rule's "Eigh" custom call
                return jacobi(ctx, operand, lower=kw["lower"], sort_eigenvalues=kw["sort_eigenvalues"],
                              subset_by_index=kw.get("subset_by_index"))
            return eigh_rule.rule(ctx, operand, algorithm=algorithm, **kw)
        mlir.register_lowering(lax_linalg.eigh_p, eigh, platform=PLATFORM)
    from jax._src import callback, debugging

    for prim in (debugging.debug_callback_p, debugging.debug_print_p, callback.pure_callback_p, callback.io_callback_p):
        mlir.register_lowering(prim, _host_callback_rule(prim), platform=PLATFORM, cacheable=False)
    _register_pallas(mlir)
    mlir.register_lowering(lax_linalg.geqrf_p, _real_only("qr", _geqrf_impl, True), platform=PLATFORM)
    mlir.register_lowering(lax_linalg.householder_product_p,
                           _real_only("householder_product", _householder_product_impl, False), platform=PLATFORM)
