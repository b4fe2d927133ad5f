#!/usr/bin/env python3
"""gen.py: programs from real libraries, as JAX lowers them and as XLA optimizes them.

Pinned (requirements.txt): jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, equinox 0.13.8,
keras 3.15.1 (JAX backend), numpy 2.4.6.
Each case in tests/programs/cases/NAME/: prog.hlo (jax.jit(f).lower(...).as_text("hlo")),
opt.hlo (XLA CPU's optimized program, compile().as_text(), source paths made relative),
inputs in*.npy (the flattened argument leaves), JAX's results out*.npy (bf16 as float32),
meta.json (library, versions, tolerance, HLO shapes of inputs and outputs).
Run by hand: python3 tests/programs/gen.py [--only NAME,...]"""
import argparse, json, os, re, shutil, sys, zlib
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["KERAS_BACKEND"] = "jax"
import jax, jax.numpy as jnp, jaxlib, numpy as np
import flax, keras, optax, equinox as eqx
from flax import linen as nn
from flax import nnx

jax.config.update("jax_enable_x64", False)
jax.config.update("jax_default_prng_impl", "threefry2x32")
jax.config.update("jax_threefry_partitionable", True)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "cases")
VERS = {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "flax": flax.__version__, "optax": optax.__version__, "equinox": eqx.__version__, "keras": keras.__version__,
        "numpy": np.__version__}
KEY = jax.random.PRNGKey(0)
MAX_CASE_BYTES = 200_000  # inputs plus outputs of one case
CASES = []  # (name, library, builder) where builder() -> (f, args, tol)


def program(name, lib):
    def reg(builder):
        CASES.append((name, lib, builder))
        return builder
    return reg


def hlo_shape(a):
    a = np.asarray(a)
    t = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "s32", "uint32": "u32", "bool": "pred",
         "int8": "s8", "uint8": "u8", "int64": "s64"}[a.dtype.name]
    return f"{t}[{','.join(map(str, a.shape))}]"


def relative_paths(text):
    """Source paths in XLA's FileNames table, relative to the repo or to site-packages."""
    text = text.replace(REPO + os.sep, "")
    return re.sub(r'"/[^"\n]*?/(site|dist)-packages/', '"', text)


def to_npy(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def f64_error(f, args, outs, tol):
    """JAX's own f32 error, as a fraction of the tolerance: the largest
    |f32 - f64| / (tol + tol |f64|) over the float outputs, with every float32 argument widened
    to float64 (jax_enable_x64 in scope). Above 1 the f32 results are not a fair reference
    (e.g. Adam normalizing a gradient that is rounding noise); the generator refuses them."""
    with jax.enable_x64(True):
        wide = jax.tree.map(lambda a: np.asarray(a, np.float64) if np.asarray(a).dtype == np.float32 else a, args)
        ref = jax.tree.leaves(jax.jit(f)(*wide))
    worst = 0.0
    for o, r in zip(outs, ref):
        o, r = np.asarray(o), np.asarray(r)
        if o.dtype.kind != "f" and o.dtype.name != "bfloat16":
            continue
        o, r = o.astype(np.float64), r.astype(np.float64)
        worst = max(worst, float(np.max(np.abs(o - r) / (tol + tol * np.abs(r)), initial=0.0)))
    return worst


def write_case(name, lib, f, args, tol, f64_check=True):
    leaves = jax.tree.leaves(args)
    jf = jax.jit(f, keep_unused=True)  # one ENTRY parameter per leaf, used or not (e.g. sgd ignores params)
    lo = jf.lower(*args)
    prog = lo.as_text(dialect="hlo")
    if "custom-call" in prog:
        raise RuntimeError(f"{name}: prog.hlo contains a custom-call")
    layout = re.search(r"entry_computation_layout=\{\((.*?)\)->", prog).group(1)
    nparams = len(re.findall(r"[a-z0-9]+\[[0-9,]*\]", layout))
    if nparams != len(leaves):
        raise RuntimeError(f"{name}: {nparams} ENTRY parameters for {len(leaves)} argument leaves")
    opt = relative_paths(lo.compile().as_text())
    outs = jax.tree.leaves(jf(*args))
    ratio = f64_error(f, args, outs, tol) if f64_check and tol > 0 else None
    if ratio is not None and ratio > 1:
        raise RuntimeError(f"{name}: JAX's f32 results are {ratio:.3g} x the tolerance away from float64")
    nbytes = sum(to_npy(a).nbytes for a in leaves + outs)
    if nbytes > MAX_CASE_BYTES:
        raise RuntimeError(f"{name}: {nbytes} bytes of inputs and outputs")
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "prog.hlo"), "w") as fh:
        fh.write(prog)
    with open(os.path.join(d, "opt.hlo"), "w") as fh:
        fh.write(opt)
    for i, a in enumerate(leaves):
        np.save(os.path.join(d, f"in{i}.npy"), to_npy(a), allow_pickle=False)
    for i, o in enumerate(outs):
        np.save(os.path.join(d, f"out{i}.npy"), to_npy(o), allow_pickle=False)
    calls = sorted(set(re.findall(r'custom_call_target="([^"]+)"', opt)))
    meta = {"name": name, "library": lib, "versions": VERS, "tol": {"rtol": tol, "atol": tol},
            "inputs": [hlo_shape(a) for a in leaves], "outputs": [hlo_shape(o) for o in outs],
            "opt_custom_calls": calls, "f32_error_vs_f64": None if ratio is None else round(ratio, 4)}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    print(f"{name}: {len(leaves)} inputs, {len(outs)} outputs, {nbytes} bytes, f32 error {ratio} of tol" +
          (f", opt.hlo custom calls {calls}" if calls else ""))


R = np.random.RandomState(0)
X = R.randn(8, 16).astype(np.float32)
Y = R.randn(8, 4).astype(np.float32)
SEQ = R.randn(2, 5, 4).astype(np.float32)
IMG = R.randn(2, 8, 8, 3).astype(np.float32)


class MLP(nn.Module):
    @nn.compact
    def __call__(self, v):
        return nn.Dense(4)(nn.relu(nn.Dense(32)(v)))


def train_step(apply, tx, loss):
    def step(p, st, *batch):
        l, g = jax.value_and_grad(lambda q: loss(apply(q, batch[0]), *batch[1:]))(p)
        u, st2 = tx.update(g, st, p)
        return l, optax.apply_updates(p, u), st2
    return step


@program("flax_linen_mlp_adam", "flax.linen MLP + optax.adam training step")
def _():
    m = MLP()
    p = m.init(KEY, X)
    tx = optax.adam(1e-2)
    return train_step(m.apply, tx, lambda o, y: jnp.mean((o - y) ** 2)), (p, tx.init(p), X, Y), 1e-4


@program("flax_cnn_adam", "flax.linen CNN (conv, BatchNorm in training mode, max_pool, avg_pool, dense) + optax.adam")
def _():
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, v):
            v = nn.Conv(8, (3, 3), use_bias=False)(v)  # a bias before BatchNorm has no gradient
            v = nn.relu(nn.BatchNorm(use_running_average=False)(v))
            v = nn.max_pool(v, (2, 2), (2, 2))
            v = nn.avg_pool(nn.Conv(4, (3, 3), padding="VALID")(v), (2, 2))
            return nn.Dense(3)(v.reshape(v.shape[0], -1))

    cnn = CNN()
    var = cnn.init(KEY, IMG)
    tx = optax.adam(1e-2)

    def step(p, bs, st, v, lab):
        def loss(q):
            o, upd = cnn.apply({"params": q, "batch_stats": bs}, v, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(o, lab).mean(), upd["batch_stats"]
        (l, bs2), g = jax.value_and_grad(loss, has_aux=True)(p)
        u, st2 = tx.update(g, st, p)
        return l, optax.apply_updates(p, u), bs2, st2

    lab = np.array([0, 2], np.int32)
    return step, (var["params"], var["batch_stats"], tx.init(var["params"]), IMG, lab), 1e-4


@program("flax_lstm_adam", "flax.linen OptimizedLSTMCell under nn.scan + optax.adam training step")
def _():
    class LSTM(nn.Module):
        @nn.compact
        def __call__(self, seq):
            cell = nn.scan(nn.OptimizedLSTMCell, variable_broadcast="params", split_rngs={"params": False},
                           in_axes=1, out_axes=1)(8)
            carry = (jnp.zeros((seq.shape[0], 8), seq.dtype),) * 2  # (c, h), as initialize_carry makes it
            return nn.Dense(1)(cell(carry, seq)[1])

    lstm = LSTM()
    p = lstm.init(KEY, SEQ)
    tx = optax.adam(1e-2)
    tgt = R.randn(2, 5, 1).astype(np.float32)
    return train_step(lstm.apply, tx, lambda o, y: jnp.mean((o - y) ** 2)), (p, tx.init(p), SEQ, tgt), 1e-4


@program("flax_nnx_linear", "flax.nnx Linear (split/merge)")
def _():
    gdef, state = nnx.split(nnx.Linear(16, 4, rngs=nnx.Rngs(0)))
    return (lambda s, v: nnx.merge(gdef, s)(v)), (state, X), 1e-5


@program("flax_nnx_mlp", "flax.nnx MLP forward (Linear, LayerNorm, gelu, Linear; split/merge)")
def _():
    class NMLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(16, 32, rngs=rngs)
            self.ln = nnx.LayerNorm(32, rngs=rngs)
            self.l2 = nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, v):
            return self.l2(nnx.gelu(self.ln(self.l1(v))))

    gdef, state = nnx.split(NMLP(nnx.Rngs(0)))
    return (lambda s, v: nnx.merge(gdef, s)(v)), (state, X), 1e-5


@program("equinox_mlp_grad", "equinox MLP under vmap, gradient")
def _():
    params, static = eqx.partition(eqx.nn.MLP(16, 4, 32, 2, key=KEY), eqx.is_array)
    return jax.grad(lambda q, v: jnp.sum(jax.vmap(eqx.combine(q, static))(v) ** 2)), (params, X), 1e-4


@program("equinox_gru_scan", "equinox GRUCell under lax.scan")
def _():
    gp, gs = eqx.partition(eqx.nn.GRUCell(4, 6, key=KEY), eqx.is_array)

    def gru_scan(q, s):
        cell = eqx.combine(q, gs)
        return jax.lax.scan(lambda h, v: (cell(v, h), h), jnp.zeros(6), s)[0]

    return gru_scan, (gp, SEQ[0]), 1e-5


def optax_case(opt, tol=1e-5):
    p = MLP().init(KEY, X)
    s0 = opt.init(p)
    g = jax.tree.map(lambda a: jnp.asarray(R.randn(*a.shape).astype(np.float32) * 0.1), p)
    # one step first, so that the state (moments, counts) is not all zeros
    s1 = opt.update(g, s0, p)[1]
    return (lambda gg, ss, pp: opt.update(gg, ss, pp)), (g, s1, p), tol


for _name, _opt in (("optax_adamw", lambda: optax.adamw(1e-2)), ("optax_lion", lambda: optax.lion(1e-3)),
                    ("optax_rmsprop", lambda: optax.rmsprop(1e-2)),
                    ("optax_sgd", lambda: optax.sgd(0.1, momentum=0.9, nesterov=True)),
                    ("optax_chain_clip_cosine", lambda: optax.chain(
                        optax.clip_by_global_norm(0.5),
                        optax.adam(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 20))))):
    program(_name, f"optax update: {_name[6:]}, state after one step")(lambda o=_opt: optax_case(o()))


@program("random_normal_uniform", "jax.random normal, uniform, randint")
def _():
    return (lambda k: (jax.random.normal(k, (4, 5)), jax.random.uniform(k, (3,)), jax.random.randint(k, (6,), 0, 9)),
            (jax.random.key_data(KEY),), 1e-6, False)  # under x64 the floats drawn are float64


@program("random_gamma_poisson", "jax.random gamma, poisson (nested jit, data-dependent while loops)")
def _():
    return (lambda k: (jax.random.gamma(jax.random.wrap_key_data(k), 2.0, (5,)),
                       jax.random.poisson(jax.random.wrap_key_data(k), 3.0, (5,))), (jax.random.key_data(KEY),), 1e-4, False)


@program("random_permutation_categorical", "jax.random permutation, categorical")
def _():
    return (lambda k: (jax.random.permutation(jax.random.wrap_key_data(k), 10),
                       jax.random.categorical(jax.random.wrap_key_data(k), jnp.log(jnp.arange(1.0, 5.0)), shape=(6,))),
            (jax.random.key_data(KEY),), 0)


@program("nn_functions", "jax.nn softmax, gelu, one_hot, logsumexp")
def _():
    return (lambda v: (jax.nn.softmax(v), jax.nn.gelu(v), jax.nn.one_hot(jnp.arange(4) % 3, 3),
                       jax.nn.logsumexp(v, axis=1)), (X,), 1e-5)


@program("linalg_norm", "jnp.linalg.norm (qr, svd, eigh, inv, det are LAPACK custom calls on CPU: not included)")
def _():
    return (lambda v: (jnp.linalg.norm(v), jnp.linalg.norm(v, axis=1, ord=1), jnp.linalg.norm(v, ord=jnp.inf),
                       jnp.linalg.norm(v[0], ord=3))), (X,), 1e-5


@program("matrix_transpose", "jnp.matrix_transpose, swapaxes on 3-D arrays (layout-changing bitcasts in opt.hlo)")
def _():
    return (lambda v: (jnp.matrix_transpose(v), jnp.swapaxes(v, 0, 2) * 2),
            (R.randn(3, 4, 5).astype(np.float32),), 0)


@program("many_leaves_step", "an SGD step over 70 parameter leaves")
def _():
    wide = {f"w{i}": R.randn(3, 2).astype(np.float32) for i in range(70)}
    return (lambda q, v: jax.tree.map(lambda a: a - 0.1 * jax.grad(lambda b: jnp.sum((v[:3, :2] * b) ** 2))(a), q),
            (wide, X), 1e-5)


@program("fori_cond", "lax.fori_loop + lax.cond")
def _():
    def fori(v):
        return jax.lax.fori_loop(0, 5, lambda i, c: jnp.tanh(c + i), v)
    return (lambda v: (fori(v), jax.lax.cond(v.sum() > 0, lambda a: a * 2, lambda a: -a, v))), (X,), 1e-6


@program("scan_reverse_unroll", "lax.scan with stacked outputs, reverse=True and unroll=2; cumulative reductions")
def _():
    def f(v):
        c, ys = jax.lax.scan(lambda c, r: (c * 0.9 + r, jnp.tanh(c) * r), jnp.zeros(16), v, reverse=True, unroll=2)
        c2, zs = jax.lax.scan(lambda c, r: (jnp.maximum(c, r), c.sum()), v[0], v[1:])
        return c, ys, c2, zs
    return f, (X,), 1e-5


@program("while_switch", "lax.while_loop with a data-dependent trip count (Newton sqrt) + lax.switch")
def _():
    def f(v, i):
        def body(s):
            y, n = s
            return 0.5 * (y + jnp.abs(v) / y), n + 1
        y, n = jax.lax.while_loop(lambda s: (jnp.max(jnp.abs(s[0] * s[0] - jnp.abs(v))) > 1e-4) & (s[1] < 50),
                                  body, (jnp.ones_like(v), 0))
        br = jax.lax.switch(i, [jnp.sin, jnp.cos, lambda a: a * a], v)
        return y, n, br
    return f, (np.abs(X) + 0.5, np.int32(1)), 1e-5


@program("transformer_block_adam", "flax.linen pre-LN transformer block (causal attention, gelu MLP) + optax.adamw")
def _():
    class Block(nn.Module):
        @nn.compact
        def __call__(self, v):
            h = nn.LayerNorm()(v)
            mask = nn.make_causal_mask(jnp.ones(v.shape[:2]))
            v = v + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16, use_bias=False)(h, h, mask=mask)
            h = nn.LayerNorm()(v)
            return v + nn.Dense(16)(nn.gelu(nn.Dense(32)(h)))

    v = R.randn(2, 8, 16).astype(np.float32)
    blk = Block()
    p = blk.init(KEY, v)
    tx = optax.adamw(1e-3)
    tgt = R.randn(2, 8, 16).astype(np.float32)
    return train_step(blk.apply, tx, lambda o, y: jnp.mean((o - y) ** 2)), (p, tx.init(p), v, tgt), 2e-4


@program("remat_mlp_grad", "jax.checkpoint (remat) in a gradient: opt-barrier in the lowered program")
def _():
    def layer(w, v):
        return jnp.tanh(v @ w)

    def loss(ws, v):
        for w in ws:
            v = jax.checkpoint(layer)(w, v)
        return jnp.sum(v ** 2)

    ws = [R.randn(16, 16).astype(np.float32) * 0.3 for _ in range(3)]
    return jax.grad(loss), (ws, X), 1e-4


@program("flax_bf16_mlp_grad", "flax.linen MLP computing in bfloat16 (dtype=bf16, f32 params), loss and gradient")
def _():
    class BMLP(nn.Module):
        @nn.compact
        def __call__(self, v):
            return nn.Dense(4, dtype=jnp.bfloat16)(nn.relu(nn.Dense(32, dtype=jnp.bfloat16)(v)))

    m = BMLP()
    p = m.init(KEY, X)
    return (jax.value_and_grad(lambda q, v, y: jnp.mean((m.apply(q, v).astype(jnp.float32) - y) ** 2)),
            (p, X, Y), 2e-2)


@program("per_example_grads", "vmap of grad (per-example gradients) and a three-operand einsum")
def _():
    w = R.randn(16, 4).astype(np.float32)

    def f(w, v, y):
        g = jax.vmap(jax.grad(lambda w, a, b: jnp.sum((a @ w - b) ** 2)), in_axes=(None, 0, 0))(w, v, y)
        return g, jnp.einsum("bi,ij,bj->b", v, w, y)
    return f, (w, X, Y), 1e-4


@program("cross_entropy_accuracy", "optax softmax cross-entropy (integer labels), label smoothing, argmax accuracy")
def _():
    lab = (np.arange(8) % 4).astype(np.int32)

    def f(logits, lab):
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, lab).mean()
        sm = optax.smooth_labels(jax.nn.one_hot(lab, 4), 0.1)
        ce2 = optax.softmax_cross_entropy(logits, sm).mean()
        acc = jnp.mean(jnp.argmax(logits, -1) == lab)
        return ce, ce2, acc, jnp.argmax(logits, -1)
    return f, (Y, lab), 1e-5


@program("keras_mlp_adam", "keras 3 (JAX backend) Sequential MLP (gelu, LayerNormalization), stateless_call + Adam "
                          "stateless_apply training step")
def _():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="gelu"),
                              keras.layers.LayerNormalization(), keras.layers.Dense(4)])
    opt = keras.optimizers.Adam(1e-2)
    opt.build(model.trainable_variables)

    def step(tv, ntv, ov, v, y):
        def loss(tv):
            out, ntv2 = model.stateless_call(tv, ntv, v)
            return jnp.mean((out - y) ** 2), ntv2
        (l, ntv2), g = jax.value_and_grad(loss, has_aux=True)(tv)
        tv2, ov2 = opt.stateless_apply(ov, g, tv)
        return l, tv2, ntv2, ov2

    vals = lambda vs: [jnp.asarray(v.value) for v in vs]  # noqa: E731
    # keras computes in its floatx (float32) whatever the inputs, so the float64 check would be vacuous
    return step, (vals(model.trainable_variables), vals(model.non_trainable_variables), vals(opt.variables), X, Y), \
        1e-4, False

@program("flax_nnx_adam_step", "flax.nnx MLP + nnx.Optimizer(optax.adam) training step (split/merge around jit)")
def _():
    class NMLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(16, 32, rngs=rngs)
            self.l2 = nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, v):
            return self.l2(nnx.relu(self.l1(v)))

    model = NMLP(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    gdef, state = nnx.split((model, opt))

    def step(state, v, y):
        model, opt = nnx.merge(gdef, state)
        loss, g = nnx.value_and_grad(lambda m: jnp.mean((m(v) - y) ** 2))(model)
        opt.update(model, g)
        return loss, nnx.state((model, opt))
    return step, (state, X, Y), 1e-4


@program("flax_embed_dropout_adam", "flax.linen Embed + Dense + dropout (rng as an input) + optax.adam: gather "
                                    "and its scatter-add gradient, random bits in the step")
def _():
    class Tok(nn.Module):
        @nn.compact
        def __call__(self, ids, train):
            h = nn.Embed(20, 8)(ids)
            h = nn.Dropout(0.25, deterministic=not train)(nn.tanh(nn.Dense(16)(h)))
            return nn.Dense(20)(h.mean(axis=1))

    ids = (np.arange(12).reshape(3, 4) * 7 % 20).astype(np.int32)
    tok = Tok()
    p = tok.init(KEY, ids, False)
    tx = optax.adam(1e-2)
    lab = np.array([1, 5, 7], np.int32)

    def step(p, st, ids, lab, k):
        def loss(q):
            o = tok.apply(q, ids, True, rngs={"dropout": jax.random.wrap_key_data(k)})
            return optax.softmax_cross_entropy_with_integer_labels(o, lab).mean()
        l, g = jax.value_and_grad(loss)(p)
        u, st2 = tx.update(g, st, p)
        return l, optax.apply_updates(p, u), st2
    # no float64 check: under x64 the dropout mask is drawn from float64 uniforms, another mask
    return step, (p, tx.init(p), ids, lab, jax.random.key_data(jax.random.PRNGKey(3))), 1e-4, False


@program("flax_conv_variants_grad", "flax.linen depthwise (feature_group_count), dilated, strided and transposed "
                                    "convolutions, GroupNorm; gradient")
def _():
    class Convs(nn.Module):
        @nn.compact
        def __call__(self, v):
            v = nn.Conv(6, (3, 3), feature_group_count=3)(v)
            v = nn.GroupNorm(num_groups=2)(v)
            v = nn.Conv(4, (3, 3), kernel_dilation=(2, 2))(nn.silu(v))
            v = nn.Conv(4, (3, 3), strides=(2, 2))(v)
            return nn.ConvTranspose(2, (3, 3), strides=(2, 2))(v)

    c = Convs()
    p = c.init(KEY, IMG)
    return jax.value_and_grad(lambda q, v: jnp.mean(c.apply(q, v) ** 2)), (p, IMG), 1e-4


@program("equinox_cnn_attention_adam", "equinox Conv2d, GroupNorm, MultiheadAttention, LayerNorm + optax.adam "
                                       "(eqx.filter_value_and_grad)")
def _():
    k1, k2, k3 = jax.random.split(KEY, 3)

    class Net(eqx.Module):
        conv: eqx.nn.Conv2d
        gn: eqx.nn.GroupNorm
        mha: eqx.nn.MultiheadAttention
        ln: eqx.nn.LayerNorm
        out: eqx.nn.Linear

        def __init__(self):
            self.conv = eqx.nn.Conv2d(3, 8, 3, padding=1, key=k1)
            self.gn = eqx.nn.GroupNorm(2, 8)
            self.mha = eqx.nn.MultiheadAttention(2, 8, key=k2)
            self.ln = eqx.nn.LayerNorm(8)
            self.out = eqx.nn.Linear(8, 3, key=k3)

        def __call__(self, img):  # img: [3, H, W]
            h = jax.nn.relu(self.gn(self.conv(img)))
            t = h.reshape(8, -1).T  # tokens [H*W, 8]
            t = jax.vmap(self.ln)(t + self.mha(t, t, t))
            return self.out(t.mean(0))

    net = Net()
    params, static = eqx.partition(net, eqx.is_array)
    tx = optax.adam(1e-2)
    imgs = np.transpose(IMG[:, :4, :4], (0, 3, 1, 2)).copy()
    lab = np.array([0, 2], np.int32)

    def step(q, st, v, lab):
        def loss(q):
            o = jax.vmap(eqx.combine(q, static))(v)
            return optax.softmax_cross_entropy_with_integer_labels(o, lab).mean()
        l, g = jax.value_and_grad(loss)(q)
        u, st2 = tx.update(g, st, q)
        return l, optax.apply_updates(q, u), st2
    return step, (params, tx.init(params), imgs, lab), 1e-4


@program("int8_quantized_matmul", "int8 weight/activation quantization (round, clip, convert), an s8 x s8 -> s32 "
                                  "dot (preferred_element_type), dequantization")
def _():
    def quant(a, axis):
        scale = jnp.max(jnp.abs(a), axis=axis, keepdims=True) / 127.0
        return jnp.clip(jnp.round(a / scale), -127, 127).astype(jnp.int8), scale

    def f(v, w):
        qv, sv = quant(v, 1)
        qw, sw = quant(w, 0)
        acc = jax.lax.dot_general(qv, qw, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        return acc, acc.astype(jnp.float32) * sv * sw
    return f, (X, R.randn(16, 8).astype(np.float32)), 1e-5


@program("dot_product_attention_grad", "jax.nn.dot_product_attention (implementation='xla', causal, GQA: 4 query "
                                       "heads over 2 key/value heads) and its gradient")
def _():
    q = R.randn(2, 8, 4, 8).astype(np.float32)
    k = R.randn(2, 8, 2, 8).astype(np.float32)
    v = R.randn(2, 8, 2, 8).astype(np.float32)

    def f(q, k, v):
        return jax.value_and_grad(lambda q, k, v: jnp.sum(jax.nn.dot_product_attention(
            q, k, v, is_causal=True, implementation="xla") ** 2), argnums=(0, 1, 2))(q, k, v)
    return f, (q, k, v), 1e-4


@program("jnp_misc", "jax.ops.segment_sum, jnp.searchsorted, jnp.interp, lax.associative_scan, jax.image.resize "
                     "(bilinear), jnp.cumsum, jnp.argsort")
def _():
    seg = (np.arange(8) % 3).astype(np.int32)

    def f(v, seg):
        xs = jnp.sort(v[0])
        return (jax.ops.segment_sum(v, seg, num_segments=3), jnp.searchsorted(xs, v[1]),
                jnp.interp(v[2], xs, jnp.arange(16.0)), jax.lax.associative_scan(jnp.add, v, axis=1),
                jax.image.resize(v[:4, :4], (6, 7), "bilinear"), jnp.cumsum(v, axis=0), jnp.argsort(v[3]))
    return f, (X, seg), 1e-5


@program("flax_f16_mlp", "flax.linen MLP in float16 (f16 parameters and inputs), forward and loss")
def _():
    m = MLP()
    p = jax.tree.map(lambda a: a.astype(jnp.float16), m.init(KEY, X))
    return (lambda q, v, y: (m.apply(q, v), jnp.mean((m.apply(q, v).astype(jnp.float32) - y) ** 2))), \
        (p, X.astype(np.float16), Y), 2e-3, False  # the float64 check widens f32 only

# Added for the speed benchmark (bench/programs_speed.py) after its rows were measured:
# programs nobody tuned the interpreter on.
for _name, _opt in (("optax_lamb", lambda: optax.lamb(1e-2)), ("optax_adafactor", lambda: optax.adafactor(1e-2)),
                    ("optax_adagrad", lambda: optax.adagrad(1e-1))):
    program(_name, f"optax update: {_name[6:]}, state after one step")(lambda o=_opt: optax_case(o()))


@program("random_bernoulli_truncnormal_choice", "jax.random bernoulli, truncated_normal, choice without replacement, "
                                                "exponential")
def _():
    def f(k):
        k = jax.random.wrap_key_data(k)
        k1, k2, k3, k4 = jax.random.split(k, 4)
        return (jax.random.bernoulli(k1, 0.3, (12,)), jax.random.truncated_normal(k2, -1.0, 2.0, (3, 4)),
                jax.random.choice(k3, 20, (6,), replace=False), jax.random.exponential(k4, (5,)))
    return f, (jax.random.key_data(KEY),), 1e-5, False


@program("random_fold_in_loop", "lax.fori_loop drawing jax.random.normal from fold_in(key, i) each iteration")
def _():
    def f(k, v):
        k = jax.random.wrap_key_data(k)
        return jax.lax.fori_loop(0, 16, lambda i, c: c * 0.9 + 0.1 * jax.random.normal(jax.random.fold_in(k, i), c.shape), v)
    return f, (jax.random.key_data(KEY), Y), 1e-5, False


@program("lax_while_newton", "lax.while_loop: Newton iterations for sqrt until converged (data-dependent trip count)")
def _():
    def f(v):
        a = jnp.abs(v) + 1.0

        def body(c):
            y, i = c
            return 0.5 * (y + a / y), i + 1

        def cond(c):
            y, i = c
            return jnp.logical_and(jnp.max(jnp.abs(y * y - a)) > 1e-5 * jnp.max(a), i < 50)
        return jax.lax.while_loop(cond, body, (a, 0))
    return f, (X,), 1e-5


@program("flax_layernorm_gelu_grad", "flax.linen LayerNorm + GELU MLP, value_and_grad of an MSE loss")
def _():
    class Block(nn.Module):
        @nn.compact
        def __call__(self, v):
            h = nn.LayerNorm()(v)
            return v[:, :4] + nn.Dense(4)(nn.gelu(nn.Dense(24)(h)))
    m = Block()
    p = m.init(KEY, X)
    return jax.value_and_grad(lambda q, v, y: jnp.mean((m.apply(q, v) - y) ** 2)), (p, X, Y), 1e-4


@program("equinox_conv_pool_grad", "equinox Conv2d + MaxPool2d + Linear, gradient of a loss (eqx.filter_value_and_grad)")
def _():
    k1, k2 = jax.random.split(KEY)
    conv = eqx.nn.Conv2d(3, 4, 3, padding=1, key=k1)
    pool = eqx.nn.MaxPool2d(2, 2)
    lin = eqx.nn.Linear(4 * 4 * 4, 2, key=k2)
    model = (conv, lin)

    def loss(mdl, img):
        c, l = mdl
        out = jax.vmap(lambda im: l(pool(jax.nn.relu(c(im))).reshape(-1)))(img)
        return jnp.mean(out ** 2)
    params, static = eqx.partition(model, eqx.is_array)
    img = np.transpose(IMG, (0, 3, 1, 2)).copy()
    return (lambda pp, im: jax.value_and_grad(lambda q: loss(eqx.combine(q, static), im))(pp)), (params, img), 1e-4


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case names")
    a = ap.parse_args()
    names = [c[0] for c in CASES]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate case names")
    only = set(a.only.split(",")) if a.only else None
    os.makedirs(OUT, exist_ok=True)
    if only is None:  # drop folders of cases that no longer exist
        for n in os.listdir(OUT):
            if n not in names:
                shutil.rmtree(os.path.join(OUT, n))
    for name, lib, builder in CASES:
        if only is None or name in only:
            R.seed(zlib.crc32(name.encode()))  # each case's draws do not depend on the others
            f, args, tol, *check = builder()
            write_case(name, lib, f, args, tol, *check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
