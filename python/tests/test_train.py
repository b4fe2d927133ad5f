"""Arrays kept in tpusim between runs (tpusim.Array, Module.call, tpusim.jit): a training
loop through them equals the NumPy round trip bit for bit; donation; the simulated clock."""
import numpy as np
import pytest

import tpusim

# One SGD step on a linear model: w' = w - lr * x^T (x w - t), loss = mean((x w - t)^2).
STEP = """HloModule step
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  w = f32[8,4] parameter(0)
  x = f32[16,8] parameter(1)
  t = f32[16,4] parameter(2)
  lr = f32[] parameter(3)
  y = f32[16,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[16,4] subtract(y, t)
  g = f32[8,4] dot(x, r), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  lrb = f32[8,4] broadcast(lr), dimensions={}
  u = f32[8,4] multiply(lrb, g)
  w2 = f32[8,4] subtract(w, u)
  r2 = f32[16,4] multiply(r, r)
  z = f32[] constant(0)
  s = f32[] reduce(r2, z), dimensions={0,1}, to_apply=add_f32
  n = f32[] constant(0.015625)
  loss = f32[] multiply(s, n)
  ROOT out = (f32[8,4], f32[]) tuple(w2, loss)
}
"""


def _data(seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    t = (x @ rng.standard_normal((8, 4))).astype(np.float32)
    return w, x, t


def test_call_loop_equals_numpy_round_trip():
    m = tpusim.load(STEP)
    w, x, t = _data()
    lr = np.float32(0.01)
    wn, losses_n, clock_n = w, [], 0.0
    for _ in range(5):
        (wn, loss), rep = m.run([wn, x, t, lr], progress=False)
        losses_n.append(loss.copy())
        clock_n += rep.step_time_s
    wb, xb, tb = tpusim.device_put(w), tpusim.device_put(x), tpusim.device_put(t)
    assert isinstance(wb, tpusim.Array) and wb.shape == (8, 4) and wb.dtype == np.float32 and wb.hlo_dtype == "f32"
    losses_b, clock_b = [], 0.0
    for _ in range(5):
        old = wb
        (wb, loss), rep = m.call([wb, xb, tb, lr], donate=[0], progress=False)
        assert old.is_deleted() and not xb.is_deleted()
        assert isinstance(loss, tpusim.Array) and loss.shape == ()
        losses_b.append(np.asarray(loss))
        clock_b += rep.step_time_s
    assert np.array_equal(np.asarray(wb), wn)  # bit for bit
    assert [a.tobytes() for a in losses_b] == [a.tobytes() for a in losses_n]
    assert losses_b[-1] < losses_b[0]
    assert clock_b == clock_n > 0
    # The reference backend runs on buffers too (no report).
    (w_ref, _), rep = m.call([tpusim.device_put(w), xb, tb, lr], backend="ref")
    assert rep is None and w_ref.shape == (8, 4)


def test_donated_and_deleted_arrays():
    m = tpusim.load(STEP)
    w, x, t = _data()
    wb = tpusim.device_put(w)
    (w2, _), _ = m.call([wb, x, t, 0.1], donate=(0,))
    assert wb.is_deleted() and "deleted" in repr(wb)
    with pytest.raises(tpusim.TpusimError, match="deleted"):
        np.asarray(wb)
    with pytest.raises(tpusim.TpusimError, match="input 0: the array was deleted"):
        m.call([wb, x, t, 0.1])
    # Donating an array that is also another input of the same run is refused, nothing lost.
    xb = tpusim.device_put(x)
    with pytest.raises(tpusim.TpusimError) as e:
        m.call([w2, xb, xb, 0.1], donate=[1])
    assert str(e.value) == "error: input 1 is donated but the same buffer is also input 2"
    assert not xb.is_deleted() and not w2.is_deleted()
    with pytest.raises(tpusim.TpusimError, match="donate: input 7 does not exist"):
        m.call([w2, x, t, 0.1], donate=[7])
    # A wrong shape is the run's usual error; a failed run donates nothing.
    with pytest.raises(tpusim.TpusimError) as e:
        m.call([xb, x, t, 0.1], donate=[0])
    assert str(e.value) == "error: input 0 is f32[16,8] but parameter 0 is f32[8,4] (the dimensions differ)"
    assert not xb.is_deleted()
    # A NumPy copy does not depend on the array afterwards.
    keep = np.asarray(w2)
    w2.delete()
    assert w2.is_deleted() and keep.shape == (8, 4)


def test_array_conversions():
    a = tpusim.device_put(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert a.shape == (2, 3) and a.ndim == 2 and a.size == 6 and len(a) == 2 and a.nbytes == 24
    assert np.asarray(a).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    s = tpusim.device_put(2.5)
    assert s.shape == () and s.dtype == np.float64 and float(s) == 2.5 and s.item() == 2.5
    assert tpusim.device_put(a) is a
    b = tpusim.device_put(np.array([1.0, 2.0], dtype=np.float16))
    assert b.hlo_dtype == "f16"
    with pytest.raises(tpusim.TpusimError, match="dtype"):
        tpusim.device_put(np.array(["x"]))


def test_bf16_parameter_from_f32_array():
    m = tpusim.load("HloModule b\nENTRY e {\n  a = bf16[3] parameter(0)\n  ROOT n = bf16[3] negate(a)\n}\n")
    a = tpusim.device_put(np.array([1.0, 3.00390625, -0.5], np.float32))  # rounded to bf16 in the run
    (n,), _ = m.call([a], backend="ref")
    assert n.hlo_dtype == "bf16"
    (want,), _ = m.run([np.array([1.0, 3.00390625, -0.5], np.float32)], backend="ref")
    assert np.asarray(n).tobytes() == np.asarray(want).tobytes()
    assert np.asarray(n).astype(np.float32).tolist() == [-1.0, -3.0, 0.5]


# ---- tpusim.jit (needs JAX) ----

def _mlp_step():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    def train_step(params, x, y, lr):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    rng = np.random.default_rng(1)
    params = {"w1": rng.standard_normal((16, 32)).astype(np.float32) / 4, "b1": np.zeros(32, np.float32),
              "w2": rng.standard_normal((32, 5)).astype(np.float32) / 6}
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = (np.abs(x[:, :5]).argmax(1)).astype(np.int32)
    return jax, train_step, params, x, y


def test_jit_training_loop_equals_numpy_round_trip():
    jax, train_step, params, x, y = _mlp_step()
    step = tpusim.jit(train_step, chip="v5e", donate_argnums=0)
    p = tpusim.device_put(params)
    assert isinstance(p["w1"], tpusim.Array)
    losses = []
    for _ in range(4):
        old = p
        p, loss = step(p, x, y, 0.5)
        assert all(a.is_deleted() for a in jax.tree_util.tree_leaves(old))
        assert isinstance(loss, tpusim.Array) and sorted(p) == ["b1", "w1", "w2"]
        losses.append(float(loss))
    assert len(step._cache) == 1  # lowered once
    assert step.clock.steps == 4 and step.clock.seconds == pytest.approx(4 * step.last_report.step_time_s)
    assert step.clock.cycles == 4 * step.last_report.cycles
    # The same steps with NumPy in and out of every run (tpusim.run on the same module).
    module = step.lower(params, x, y, 0.5)[0]
    pn, losses_n = params, []
    for _ in range(4):
        outs, _ = module.run(jax.tree_util.tree_leaves((pn, x, y, np.float32(0.5))), progress=False)
        pn = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), outs[:-1])
        losses_n.append(float(outs[-1]))
    assert losses == losses_n
    for k in params:
        assert np.asarray(p[k]).tobytes() == pn[k].tobytes(), k
    # And close to JAX on CPU (one bf16 MXU pass per dot on tpusim, f32 on the CPU).
    pj = params
    for _ in range(4):
        pj, lj = jax.jit(train_step)(pj, x, y, 0.5)
    assert losses[-1] == pytest.approx(float(lj), abs=0.05)
    assert losses[-1] < losses[0]


def test_jit_shared_clock_numpy_arguments_and_retrace():
    jax, train_step, params, x, y = _mlp_step()
    clock = tpusim.Clock()
    step = tpusim.jit(train_step, chip="v5p", clock=clock)
    p, _ = step(params, x, y, 0.5)  # NumPy leaves are copied in; nothing donated
    p, _ = step(p, x[:32], y[:32], 0.5)  # a new signature: lowered again
    assert len(step._cache) == 2 and clock.steps == 2
    assert step.last_report.chip == "v5p"
    evaluate = tpusim.jit(lambda p, x: jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"], clock=clock, chip="v5p")
    logits = evaluate(p, x)
    assert logits.shape == (64, 5) and clock.steps == 3 and not p["w1"].is_deleted()
    clock.reset()
    assert clock.seconds == 0 and clock.steps == 0


def test_jit_reference_backend_and_pytree_outputs():
    jax, train_step, params, x, y = _mlp_step()
    step = tpusim.jit(train_step, backend="ref")
    p, loss = step(tpusim.device_put(params), x, y, 0.5)
    assert step.last_report is None and step.clock.steps == 0  # the reference backend times nothing
    want_p, want_loss = jax.jit(train_step)(params, x, y, 0.5)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(np.asarray(p[k]), np.asarray(want_p[k]), rtol=1e-4, atol=1e-5)
