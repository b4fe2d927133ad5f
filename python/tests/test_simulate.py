"""tpusim.simulate on JAX functions, against JAX on CPU."""
import inspect
import os

import numpy as np
import pytest

import tpusim

jax = pytest.importorskip("jax")
jnp = jax.numpy


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    y = h @ params["w2"]
    return {"y": y, "loss": jnp.mean(y**2)}, jnp.argmax(y, axis=-1)


def _params(rng):
    return {"w1": rng.standard_normal((32, 64)).astype(np.float32),
            "b1": rng.standard_normal(64).astype(np.float32),
            "w2": rng.standard_normal((64, 16)).astype(np.float32) / 8}


def test_simulate_pytree_matches_jax():
    rng = np.random.default_rng(0)
    params, x = _params(rng), rng.standard_normal((8, 32)).astype(np.float32)
    want = jax.jit(mlp)(params, x)
    got, rep = tpusim.simulate(mlp, params, x, precision="highest")
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-5)
    assert rep.cycles > 0 and rep.flops >= 2 * 8 * 32 * 64 + 2 * 8 * 64 * 16
    # Every op names its JAX op and line in this file (from the lowered text's metadata).
    first = inspect.getsourcelines(mlp)[1]
    dots = [r for r in rep.ops if r["op_name"] == "jit(mlp)/dot_general"]
    assert len(dots) == 2, [(r["name"], r["op_name"]) for r in rep.ops]
    assert sorted(r["source"].rsplit(":", 1)[1] for r in dots) == [str(first + 1), str(first + 2)]
    for r in rep.ops:
        # (argmax's reduce sits in a nested computation whose metadata JAX names "reduce")
        assert r["op_name"] and r["function"] == "mlp"
        assert os.path.basename(r["source"].rsplit(":", 1)[0]) == "test_simulate.py"
    # Default precision: dots as one bf16 pass, as a TPU does.
    lo, _ = tpusim.simulate(mlp, params, x)
    err = np.abs(lo[0]["y"] - np.asarray(want[0]["y"])).max()
    assert 0 < err < 5e-2


def test_simulate_bf16_and_python_scalars():
    def f(a, b, s):
        return (a @ b) * s

    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.standard_normal((16, 32)), dtype=jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((32, 8)), dtype=jnp.bfloat16)
    want = np.asarray(jax.jit(f)(a, b, 0.5)).astype(np.float32)
    got, rep = tpusim.simulate(f, a, b, 0.5, chip="v5p")
    assert got.dtype == jnp.bfloat16 and got.shape == (16, 8) and rep.chip == "v5p"
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_simulate_timing_and_ref():
    rng = np.random.default_rng(2)
    params, x = _params(rng), rng.standard_normal((8, 32)).astype(np.float32)
    out, rep = tpusim.simulate(mlp, params, x, mode="timing")
    _, full = tpusim.simulate(mlp, params, x)
    assert out is None and rep.cycles == full.cycles
    ref, none = tpusim.simulate(mlp, params, x, backend="ref")
    assert none is None
    np.testing.assert_allclose(ref[0]["y"], np.asarray(jax.jit(mlp)(params, x)[0]["y"]), rtol=2e-5, atol=2e-5)


def test_simulate_complex_fft():
    x = np.random.default_rng(3).standard_normal(16).astype(np.float32)
    got, _ = tpusim.simulate(jnp.fft.fft, x, backend="ref")
    want = np.asarray(jax.jit(jnp.fft.fft)(x))
    assert got.dtype == np.complex64 and got.shape == (16,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_simulate_error_names_function():
    def factor(a):
        return jnp.linalg.cholesky(a)

    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.simulate(factor, np.eye(3, dtype=np.float32))
    # the lowered text is named after the function; the location is the instruction's in it
    assert str(e.value).startswith("jit(factor):") and e.value.line > 0 and e.value.col > 0
    msg = str(e.value)  # (a CPU LAPACK custom call)
    assert ": error: " in msg and "custom-call" in msg and "cannot run" in msg
    assert e.value.status == "TPU_ERR_UNSUPPORTED"


def test_simulate_sharded_jit():
    """Arguments sharded over a 2 x 4 mesh of JAX's CPU devices: the lowered text carries
    the shardings and the mesh; tpusim partitions it over 8 simulated chips."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax loads)")
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))

    def f(a, w):
        h = jnp.tanh(a @ w)
        return h, jnp.sum(h, axis=0)

    rng = np.random.default_rng(4)
    a = jax.device_put(rng.standard_normal((16, 32)).astype(np.float32), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(rng.standard_normal((32, 24)).astype(np.float32), NamedSharding(mesh, P(None, "y")))
    want = jax.jit(f)(a, w)
    got, rep = tpusim.simulate(f, a, w, precision="highest")
    for g, x in zip(got, want):
        assert g.shape == x.shape  # global arrays, assembled from the 8 chips' shards
        np.testing.assert_allclose(g, np.asarray(x), rtol=2e-5, atol=2e-5)
    assert rep.devices == 8 and rep.ici_bytes > 0
    # the same over a mesh given by hand; a mesh of the wrong size is an error
    again, rep2 = tpusim.simulate(f, a, w, precision="highest", mesh={"x": 2, "y": 4})
    assert np.array_equal(again[0], got[0]) and rep2.cycles == rep.cycles
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.simulate(f, a, w, mesh="x=3")
    assert "error:" in str(e.value)
