#!/usr/bin/env python3
"""gen.py: programs from real libraries, as JAX lowers them and as XLA optimizes them.

Pinned (requirements.txt): jax 0.10.2, flax 0.12.8, optax 0.2.8, equinox 0.13.8, numpy.
Each case in tests/programs/cases/NAME/: prog.hlo (jax.jit(f).lower(...).as_text("hlo")),
opt.hlo (XLA CPU's optimized program, compile().as_text()), inputs in*.npy (the flattened
argument leaves), JAX's results out*.npy (bf16 as float32), meta.json (library, versions,
tolerance). Run by hand: python3 tests/programs/gen.py"""
import json, os, shutil
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np
import flax, optax, equinox as eqx
from flax import linen as nn
from flax import nnx

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
VERS = {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__, "equinox": eqx.__version__,
        "numpy": np.__version__}
KEY = jax.random.PRNGKey(0)


def case(name, lib, f, args, tol=1e-5):
    leaves = jax.tree.leaves(args)
    jf = jax.jit(f)
    lo = jf.lower(*args)
    c = lo.compile()
    outs = jax.tree.leaves(jf(*args))
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    open(os.path.join(d, "prog.hlo"), "w").write(lo.as_text(dialect="hlo"))
    open(os.path.join(d, "opt.hlo"), "w").write(c.as_text())
    for i, a in enumerate(leaves):
        a = np.asarray(a)
        np.save(os.path.join(d, f"in{i}.npy"), a.astype(np.float32) if a.dtype.name == "bfloat16" else a)
    for i, o in enumerate(outs):
        o = np.asarray(o)
        np.save(os.path.join(d, f"out{i}.npy"), o.astype(np.float32) if o.dtype.name == "bfloat16" else o)
    json.dump({"name": name, "library": lib, "versions": VERS, "tol": {"rtol": tol, "atol": tol},
               "inputs": len(leaves), "outputs": len(outs)}, open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(f"{name}: {len(leaves)} inputs, {len(outs)} outputs")


def main():
    r = np.random.RandomState(0)
    x = r.randn(8, 16).astype(np.float32)
    y = r.randn(8, 4).astype(np.float32)

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, v):
            return nn.Dense(4)(nn.relu(nn.Dense(32)(v)))

    m = MLP()
    p = m.init(KEY, x)
    tx = optax.adam(1e-2)
    st = tx.init(p)

    def linen_adam_step(p, st, x, y):
        l, g = jax.value_and_grad(lambda q: jnp.mean((m.apply(q, x) - y) ** 2))(p)
        u, st2 = tx.update(g, st, p)
        return l, optax.apply_updates(p, u), st2

    case("flax_linen_mlp_adam", "flax.linen + optax.adam", linen_adam_step, (p, st, x, y), tol=1e-4)

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, v):
            v = nn.relu(nn.Conv(8, (3, 3))(v))
            v = nn.avg_pool(v, (2, 2), (2, 2))
            return nn.Dense(3)(v.reshape(v.shape[0], -1))

    img = r.randn(2, 8, 8, 3).astype(np.float32)
    cnn = CNN()
    pc = cnn.init(KEY, img)
    sgd = optax.sgd(0.1, momentum=0.9)
    sc = sgd.init(pc)

    def cnn_step(p, s, v):
        l, g = jax.value_and_grad(lambda q: jnp.sum(cnn.apply(q, v) ** 2))(p)
        u, s2 = sgd.update(g, s, p)
        return l, optax.apply_updates(p, u), s2

    case("flax_cnn_sgd_momentum", "flax.linen + optax.sgd", cnn_step, (pc, sc, img), tol=1e-4)

    class LSTM(nn.Module):
        @nn.compact
        def __call__(self, seq):
            cell = nn.scan(nn.OptimizedLSTMCell, variable_broadcast="params", split_rngs={"params": False},
                           in_axes=1, out_axes=1)(8)
            carry = cell.initialize_carry(jax.random.PRNGKey(1), seq[:, 0].shape)
            return cell(carry, seq)[1]

    seq = r.randn(2, 5, 4).astype(np.float32)
    lstm = LSTM()
    pl = lstm.init(KEY, seq)
    case("flax_lstm_grad", "flax.linen LSTM scan", jax.grad(lambda q, s: jnp.sum(lstm.apply(q, s) ** 2)), (pl, seq),
         tol=1e-4)

    nmod = nnx.Linear(16, 4, rngs=nnx.Rngs(0))
    gdef, state = nnx.split(nmod)
    case("flax_nnx_linear", "flax.nnx", lambda s, v: nnx.merge(gdef, s)(v), (state, x))

    mlp = eqx.nn.MLP(16, 4, 32, 2, key=KEY)
    params, static = eqx.partition(mlp, eqx.is_array)
    case("equinox_mlp_grad", "equinox", jax.grad(lambda q, v: jnp.sum(jax.vmap(eqx.combine(q, static))(v) ** 2)),
         (params, x), tol=1e-4)
    gru = eqx.nn.GRUCell(4, 6, key=KEY)
    gp, gs = eqx.partition(gru, eqx.is_array)

    def gru_scan(q, s):
        cell = eqx.combine(q, gs)
        return jax.lax.scan(lambda h, v: (cell(v, h), h), jnp.zeros(6), s)[0]

    case("equinox_gru_scan", "equinox GRU + lax.scan", gru_scan, (gp, seq[0]), tol=1e-5)

    for name, opt in (("optax_adamw", optax.adamw(1e-2)), ("optax_lion", optax.lion(1e-3)),
                      ("optax_rmsprop", optax.rmsprop(1e-2))):
        s0 = opt.init(p)
        g = jax.tree.map(lambda a: jnp.ones_like(a) * 0.1, p)
        case(name, "optax", lambda gg, ss, pp, o=opt: o.update(gg, ss, pp), (g, s0, p), tol=1e-5)

    case("random_normal_uniform", "jax.random",
         lambda k: (jax.random.normal(k, (4, 5)), jax.random.uniform(k, (3,)), jax.random.randint(k, (6,), 0, 9)),
         (jax.random.key_data(KEY),), tol=1e-6)
    case("random_gamma_poisson", "jax.random (nested jit, data-dependent loops)",
         lambda k: (jax.random.gamma(jax.random.wrap_key_data(k), 2.0, (5,)),
                    jax.random.poisson(jax.random.wrap_key_data(k), 3.0, (5,))), (jax.random.key_data(KEY),), tol=1e-4)
    case("random_permutation_categorical", "jax.random",
         lambda k: (jax.random.permutation(jax.random.wrap_key_data(k), 10),
                    jax.random.categorical(jax.random.wrap_key_data(k), jnp.log(jnp.arange(1.0, 5.0)), shape=(6,))),
         (jax.random.key_data(KEY),), tol=0)
    case("nn_functions", "jax.nn",
         lambda v: (jax.nn.softmax(v), jax.nn.gelu(v), jax.nn.one_hot(jnp.arange(4) % 3, 3), jax.nn.logsumexp(v, axis=1)),
         (x,), tol=1e-5)
    case("linalg_norm", "jnp.linalg", lambda v: (jnp.linalg.norm(v), jnp.linalg.norm(v, axis=1, ord=1)), (x,))
    case("matrix_transpose", "jnp", lambda v: (jnp.matrix_transpose(v), jnp.swapaxes(v, 0, 2) * 2),
         (r.randn(3, 4, 5).astype(np.float32),), tol=0)
    wide = {f"w{i}": r.randn(3, 2).astype(np.float32) for i in range(70)}
    case("many_leaves_step", "a step with 70 parameter leaves",
         lambda q, v: jax.tree.map(lambda a: a - 0.1 * jax.grad(lambda b: jnp.sum((v[:3, :2] * b) ** 2))(a), q),
         (wide, x), tol=1e-5)

    def fori(v):
        return jax.lax.fori_loop(0, 5, lambda i, c: jnp.tanh(c + i), v)

    case("fori_cond", "lax.fori_loop + lax.cond",
         lambda v: (fori(v), jax.lax.cond(v.sum() > 0, lambda a: a * 2, lambda a: -a, v)), (x,), tol=1e-6)


if __name__ == "__main__":
    main()
