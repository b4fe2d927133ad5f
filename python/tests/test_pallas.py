"""Pallas TPU kernels through tpusim (src/mosaic/, docs/pallas.md): a kernel lowered for a TPU
(jax.experimental.topologies: no TPU needed) runs from HLO text and from a file, its values
equal to Pallas's interpret mode; `tpusim run` decodes it through python3 and jax. Skipped
without jax."""
import os
import subprocess

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the Pallas tests need jax (pip install jax)")
import jax.numpy as jnp  # noqa: E402

import tpusim  # noqa: E402


def _lower():
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from jax.experimental import pallas as pl
        from jax.experimental import topologies
        from jax.sharding import SingleDeviceSharding
        dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    except Exception as e:  # no libtpu: nothing lowers for a TPU here
        pytest.skip("lowering for a TPU needs libtpu (pip install 'jax[tpu]'): %s" % e)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...]) + jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def f(x, y, interpret=False):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)), pl.BlockSpec((128, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x, y)
    s = [jax.ShapeDtypeStruct(sh, jnp.float32, sharding=SingleDeviceSharding(dev)) for sh in ((16, 128), (128, 128))]
    return f, jax.jit(f).lower(*s).as_text(dialect="hlo")


def _inputs():
    r = np.random.default_rng(7)
    return r.standard_normal((16, 128)).astype(np.float32), r.standard_normal((128, 128)).astype(np.float32)


def test_pallas_kernel_values_match_interpret_mode():
    f, text = _lower()
    assert "tpu_custom_call" in text
    x, y = _inputs()
    want = np.asarray(jax.jit(lambda a, b: f(a, b, interpret=True))(x, y))
    outs, _ = tpusim.run(text, [x, y], backend="ref")
    np.testing.assert_allclose(np.asarray(outs[0]), want, rtol=2e-5, atol=2e-4)


def test_cli_decodes_pallas_kernels(tmp_path):
    f, text = _lower()
    prog = tmp_path / "k.hlo"
    prog.write_text(text)
    x, y = _inputs()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cli = os.environ.get("TPUSIM_CLI", "tpusim")
    r = subprocess.run([cli, "run", str(prog), "-i", str(tmp_path / "x.npy"), "-i", str(tmp_path / "y.npy"), "-o",
                        str(tmp_path / "out"), "--backend", "ref"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = np.asarray(jax.jit(lambda a, b: f(a, b, interpret=True))(x, y))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "0.npy"), want, rtol=2e-5, atol=2e-4)


def _user_fn():
    """A jitted function with XLA ops around a Pallas kernel (a K-loop accumulator)."""
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def f(x, y, interpret=False):
        k = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2, 2),
                           in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
                           out_specs=pl.BlockSpec((8, 128), lambda i, k: (i, 0)), interpret=interpret)
        return jnp.tanh(k(x * 0.5, y)).sum(0) + 1.0
    r = np.random.default_rng(3)
    return f, (r.standard_normal((16, 256)).astype(np.float32), r.standard_normal((256, 128)).astype(np.float32))


def test_simulate_lowers_pallas_kernels_for_a_tpu():
    """tpusim.simulate on a function holding a pallas_call (which lowers only for a TPU): values
    as interpret mode's, and a time."""
    f, (x, y) = _user_fn()
    want = np.asarray(jax.jit(lambda a, b: f(a, b, interpret=True))(x, y))
    out, rep = tpusim.simulate(f, x, y)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
    assert rep.step_time_s > 0 and any(o["kind"].startswith("pallas:") for o in rep.ops)


def test_pjrt_plugin_runs_pallas_kernels():
    """JAX_PLATFORMS=tpusim: a jitted function containing a pallas_call runs end to end (the
    plugin lowers pallas_call as for a TPU and decodes its kernel) with interpret mode's values."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "python"))
    from jax_plugins import tpusim as plugin
    if not os.path.exists(plugin.library_path()):
        pytest.skip("the PJRT plugin is not built (%s)" % plugin.library_path())
    f, (x, y) = _user_fn()
    want = np.asarray(jax.jit(lambda a, b: f(a, b, interpret=True))(x, y))
    code = ("import sys, numpy as np, jax\nsys.path.insert(0, %r)\nimport test_pallas as t\n"
            "f, (x, y) = t._user_fn()\nprint(jax.devices()[0].platform)\n"
            "print(' '.join(repr(float(v)) for v in np.asarray(jax.jit(f)(x, y))))\n") % os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, JAX_PLATFORMS="tpusim")
    env["PYTHONPATH"] = os.path.join(root, "python") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-2] == "tpusim"
    np.testing.assert_allclose(np.array([float(v) for v in lines[-1].split()]), want, rtol=1e-5, atol=1e-5)


def _v5e_prefetch_call():
    """A v5e device to lower for and a Pallas call whose scalar-prefetch operand picks the
    block each of its 8 grid steps reads (x * 2 of the picked blocks); skips without libtpu."""
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu
        from jax.experimental import topologies
        dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    except Exception as e:
        pytest.skip("lowering for a TPU needs libtpu (pip install 'jax[tpu]'): %s" % e)

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def call(idx, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8 * 256, 512), jnp.float32),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=1, grid=(8,),
                                  in_specs=[pl.BlockSpec((256, 512), lambda i, idx: (idx[i], 0))],
                                  out_specs=pl.BlockSpec((256, 512), lambda i, idx: (i, 0))))(idx, x)
    return dev, call


def test_each_run_is_timed_on_its_own_scalar_prefetch():
    """A module run again with other scalar-prefetch values (here the block each grid step
    reads: one block for every step, or a new block a step) is timed on its own values, not
    on those of the run that compiled the cached program (docs/pallas.md)."""
    from jax.sharding import SingleDeviceSharding
    dev, f = _v5e_prefetch_call()
    s = [jax.ShapeDtypeStruct((8,), jnp.int32, sharding=SingleDeviceSharding(dev)),
         jax.ShapeDtypeStruct((8 * 256, 512), jnp.float32, sharding=SingleDeviceSharding(dev))]
    text = jax.jit(f).lower(*s).as_text(dialect="hlo")
    x = np.random.default_rng(5).standard_normal((8 * 256, 512)).astype(np.float32)
    same, each = np.zeros(8, np.int32), np.arange(8, dtype=np.int32)
    tpusim.cache_clear()
    out_same, rep_same = tpusim.run(text, [same, x])
    out_each, rep_each = tpusim.run(text, [each, x])  # the cached program, compiled on `same`
    tpusim.cache_clear()
    _, rep_fresh = tpusim.run(text, [each, x])
    np.testing.assert_array_equal(out_same[0], np.tile(x[:256] * 2, (8, 1)))
    np.testing.assert_array_equal(out_each[0], x * 2)
    assert rep_each.step_time_s == rep_fresh.step_time_s
    assert rep_each.step_time_s > rep_same.step_time_s  # 8 blocks fetched against 1


def test_calls_in_a_loop_are_timed_on_each_iterations_scalars():
    """A kernel called in every iteration of a scan, its scalar-prefetch operand another in
    each iteration (the block each grid step reads: one block for all steps, or a new one a
    step), is timed per iteration on that iteration's scalars (src/mosaic/backend.c), not on
    the first iteration's: one iteration of 8 fetches among 4 adds a quarter of what 8
    fetches in every iteration add."""
    from jax import lax
    from jax.sharding import SingleDeviceSharding
    dev, call = _v5e_prefetch_call()

    def loop(idxs, x):
        return lax.scan(lambda c, idx: (call(idx, c), None), x, idxs)[0]
    sd = SingleDeviceSharding(dev)
    s = [jax.ShapeDtypeStruct((4, 8), jnp.int32, sharding=sd), jax.ShapeDtypeStruct((8 * 256, 512), jnp.float32, sharding=sd)]
    text = jax.jit(loop).lower(*s).as_text(dialect="hlo")
    x = np.random.default_rng(5).standard_normal((8 * 256, 512)).astype(np.float32)
    same, each = np.zeros(8, np.int32), np.arange(8, dtype=np.int32)
    t = {}
    for name, rows in (("same", [same] * 4), ("each", [each] * 4), ("one_same", [same, each, each, each]),
                       ("one_each", [each, same, same, same])):
        outs, rep = tpusim.run(text, [np.stack(rows), x])
        t[name] = rep.step_time_s
        if name == "one_each":
            np.testing.assert_array_equal(outs[0], np.tile(x[:256] * 16, (8, 1)))
    d = t["each"] - t["same"]
    assert d > 0.2 * t["same"]
    assert abs(t["one_each"] - t["same"] - d / 4) < 0.02 * d
    assert abs(t["one_same"] - t["same"] - 3 * d / 4) < 0.02 * d


def test_calls_in_nested_loops_and_a_conditional_are_timed_on_each_iterations_scalars():
    """The same kernel in an inner scan of 2 inside an outer scan of 2 (4 calls in the order
    outer pass by outer pass), and in a conditional's branch inside a scan of 4 whose branch
    runs every iteration: iteration i, counted over the loops, runs the plan of the run's
    call i (before: the inner loop's iterations ran the first outer pass's calls, and the
    branch the first call's plan): one fetching call among 4 adds a quarter of what fetching
    in all 4 adds, wherever it sits (docs/pallas.md)."""
    from jax import lax
    from jax.sharding import SingleDeviceSharding
    dev, call = _v5e_prefetch_call()

    def nested(idxs, x):
        def outer(c, row):
            return lax.scan(lambda c2, idx: (call(idx, c2), None), c, row)[0], None
        return lax.scan(outer, x, idxs.reshape(2, 2, 8))[0]

    def branch(idxs, x):
        def body(c, idx):
            return lax.cond(idx[0] >= 0, lambda v: call(idx, v), lambda v: v, c), None
        return lax.scan(body, x, idxs)[0]
    sd = SingleDeviceSharding(dev)
    s = [jax.ShapeDtypeStruct((4, 8), jnp.int32, sharding=sd), jax.ShapeDtypeStruct((8 * 256, 512), jnp.float32, sharding=sd)]
    x = np.random.default_rng(6).standard_normal((8 * 256, 512)).astype(np.float32)
    same, each = np.zeros(8, np.int32), np.arange(8, dtype=np.int32)
    for fn in (nested, branch):
        text = jax.jit(fn).lower(*s).as_text(dialect="hlo")
        t = {}
        # the fetching call last: an outer pass other than the first, the last iteration
        for name, rows in (("same", [same] * 4), ("each", [each] * 4), ("last_each", [same, same, same, each]),
                           ("first_each", [each, same, same, same])):
            outs, rep = tpusim.run(text, [np.stack(rows), x])
            t[name] = rep.step_time_s
        d = t["each"] - t["same"]
        assert d > 0.2 * t["same"], (fn.__name__, t)
        for name in ("last_each", "first_each"):
            assert abs(t[name] - t["same"] - d / 4) < 0.05 * d, (fn.__name__, name, t)


def test_a_branch_run_in_some_iterations_is_timed_on_its_calls_scalars():
    """The same kernel in a conditional's branch inside a scan of 4 whose branch runs in
    iterations 1 and 3 only: the run records each call's iteration, and iteration 3's plan is
    its own call's (the timing takes the costliest branch every iteration, docs/timing.md; the
    iterations whose branch did not run, 0 and 2, take the first call's plan). The fetching
    call last adds a quarter of what fetching in all 4 adds; first, three quarters (its own
    iteration and the two that did not run; before: every iteration ran the first call's
    plan, so nothing and all of it)."""
    from jax import lax
    from jax.sharding import SingleDeviceSharding
    dev, call = _v5e_prefetch_call()

    def branch(idxs, x):
        def body(c, idx):
            return lax.cond(idx[0] >= 0, lambda v: call(idx, v), lambda v: v, c), None
        return lax.scan(body, x, idxs)[0]
    sd = SingleDeviceSharding(dev)
    s = [jax.ShapeDtypeStruct((4, 8), jnp.int32, sharding=sd), jax.ShapeDtypeStruct((8 * 256, 512), jnp.float32, sharding=sd)]
    x = np.random.default_rng(6).standard_normal((8 * 256, 512)).astype(np.float32)
    same, each, off = np.zeros(8, np.int32), np.arange(8, dtype=np.int32), np.full(8, -1, np.int32)
    text = jax.jit(branch).lower(*s).as_text(dialect="hlo")
    t = {}
    for name, rows in (("same", [same] * 4), ("each", [each] * 4), ("last_each", [off, same, off, each]),
                       ("first_each", [off, each, off, same])):
        outs, rep = tpusim.run(text, [np.stack(rows), x])
        t[name] = rep.step_time_s
    d = t["each"] - t["same"]
    assert d > 0.2 * t["same"], t
    for name, q in (("last_each", 0.25), ("first_each", 0.75)):
        assert abs(t[name] - t["same"] - q * d) < 0.05 * d, (name, t)
