"""tpusim.run on HLO text and files: values against JAX's and the CLI's, timing, errors."""
import json
import os
import subprocess

import numpy as np
import pytest

import tpusim
from conftest import EX

MLP = os.path.join(EX, "mlp.hlo")


def test_mlp_values_match_jax(mlp_inputs):
    want = np.load(os.path.join(EX, "mlp.out0.npy"))
    outs, rep = tpusim.run(MLP, mlp_inputs, precision="highest")
    assert len(outs) == 1 and outs[0].dtype == np.float32 and outs[0].shape == want.shape
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)
    # One bf16 pass per dot (precision default) is measurably less exact, within bf16's tolerance.
    lo, _ = tpusim.run(MLP, mlp_inputs, precision="default")
    err = np.abs(lo[0] - want).max()
    assert 1e-5 < err < 5e-2
    # The reference interpreter: f32 exactly as the spec says, no report.
    ref, rrep = tpusim.run(MLP, mlp_inputs, backend="ref")
    assert rrep is None
    np.testing.assert_allclose(ref[0], want, rtol=1e-5, atol=1e-5)


def test_text_and_module_reuse(mlp_inputs):
    with open(MLP) as f:
        text = f.read()
    a, ra = tpusim.run(text, mlp_inputs)
    m = tpusim.load(MLP)
    assert m.devices == 1 and [p.shape for p in m.params] == [x.shape for x in mlp_inputs]
    b, rb = m.run(mlp_inputs)
    c, rc = m.run(mlp_inputs)  # a module runs again with the same results
    # A run reads nothing of its report until the caller looks (a training loop that never
    # does pays nothing for it: reading the per-op profile costs more than a small step).
    assert not rb.__dict__["_loaded"] and not rc.__dict__["_loaded"]
    assert np.array_equal(a[0], b[0]) and np.array_equal(b[0], c[0])
    assert ra.cycles == rb.cycles == rc.cycles > 0


def test_same_as_cli(mlp_inputs, cli, tmp_path):
    """The library and `tpusim run` give bit-identical values and the same report."""
    ins = sum((["-i", os.path.join(EX, f"mlp.in{i}.npy")] for i in range(5)), [])
    subprocess.run([cli, "run", MLP, *ins, "-o", str(tmp_path / "o"), "--report", str(tmp_path / "cli.json"), "-q"],
                   check=True)
    outs, rep = tpusim.run(MLP, mlp_inputs)
    assert np.array_equal(outs[0], np.load(tmp_path / "o" / "0.npy"))
    rep.save_json(tmp_path / "api.json")
    with open(tmp_path / "cli.json") as f:
        cj = json.load(f)
    with open(tmp_path / "api.json") as f:
        aj = json.load(f)
    assert aj == rep.to_dict()
    assert aj == cj  # the same program path, mode and chip: the same report, field for field
    assert aj["step"]["cycles"] == rep.cycles and aj["mode"] == "full" and aj["chip"]["name"] == "v5e"


def test_timing_mode_same_cycles(mlp_inputs):
    _, full = tpusim.run(MLP, mlp_inputs)
    outs, timing = tpusim.run(MLP, mode="timing")
    assert outs is None
    assert timing.cycles == full.cycles and timing.flops == full.flops and timing.hbm_bytes == full.hbm_bytes
    _, v4 = tpusim.run(MLP, mode="timing", chip="v4")
    assert v4.chip == "v4" and full.chip == "v5e" and v4.clock_hz != full.clock_hz


def test_report_fields(mlp_inputs, tmp_path):
    _, r = tpusim.run(MLP, mlp_inputs)
    assert r.cycles > 0
    assert r.step_time_s == pytest.approx(r.cycles / r.clock_hz, rel=1e-12)
    # 2*M*N*K for the two dots of the MLP (8x64 @ 64x128, 8x128 @ 128x10) plus elementwise ops
    assert r.flops >= 2 * 8 * 64 * 128 + 2 * 8 * 128 * 10
    assert r.mfu == pytest.approx(r.flops / r.step_time_s / r.peak_flops_per_s, rel=1e-9)
    assert 0 < r.mfu < 1 and r.peak_kind == "bf16"
    # every input once but w1 (the cross-program prefetch: read from VMEM, loaded by the step
    # before), and the result, padded to tiles: x f32[8,64] 8 x 128, b1 128, w2 f32[128,10]
    # laid out {0,1} as the compiler lays it, 16 x 128, b2 128, the result 8 x 128 (f32)
    assert r.hbm_bytes == 4 * (8 * 128 + 128 + 16 * 128 + 128 + 8 * 128)
    assert set(r.breakdown) == {"mxu_busy", "vector_busy", "hbm_wait", "ici_wait", "idle"}
    assert sum(r.breakdown.values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(r.breakdown_cycles.values()) == r.cycles
    assert r.ops and all(set(o) >= {"name", "kind", "cycles", "flops", "hbm_bytes", "frac"} for o in r.ops)
    assert [o["cycles"] for o in r.ops] == sorted((o["cycles"] for o in r.ops), reverse=True)
    assert sum(o["flops"] for o in r.ops) == pytest.approx(r.flops, rel=1e-9)
    assert sum(o["hbm_bytes"] for o in r.ops) == pytest.approx(r.hbm_bytes, rel=1e-9)
    assert any(o["kind"].startswith("fusion") or o["kind"] == "dot" for o in r.ops)
    r.save_trace(tmp_path / "t.json")
    with open(tmp_path / "t.json") as f:
        tr = json.load(f)
    spans = [e for e in tr["traceEvents"] if e.get("ph") == "X"]
    assert spans and max(e["ts"] + e["dur"] for e in spans) == pytest.approx(r.step_time_s * 1e6, rel=1e-3)
    h = r._repr_html_()
    assert "MFU" in h and r.ops[0]["name"] in h
    assert "MFU" in repr(r)


def test_report_pandas(mlp_inputs):
    pd = pytest.importorskip("pandas")
    _, r = tpusim.run(MLP, mlp_inputs)
    df = r.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == len(r.ops) and df["cycles"].iloc[0] == r.ops[0]["cycles"]


def test_plots(mlp_inputs):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    _, r = tpusim.run(MLP, mlp_inputs)
    ax = r.plot_roofline()
    assert ax.get_xscale() == "log" and len(ax.collections) >= 1
    ax2 = r.plot_timeline()
    assert len(ax2.collections) > 0 and len(ax2.get_yticklabels()) >= 2
    plt.close("all")


def test_outputs_outlive_handles(mlp_inputs):
    """Outputs are views of the result's memory: they stay valid after everything else goes."""
    import gc

    m = tpusim.load(MLP)
    outs, rep = m.run(mlp_inputs)
    want = outs[0].copy()
    del m, rep
    gc.collect()
    _ = [np.ones(1000) for _ in range(100)]
    assert np.array_equal(outs[0], want)


def test_python_numbers_and_bf16():
    hlo = """HloModule m
ENTRY e {
  a = bf16[3] parameter(0)
  b = s32[] parameter(1)
  c = bf16[] convert(b)
  bc = bf16[3] broadcast(c), dimensions={}
  m = bf16[3] multiply(a, bc)
  ROOT r = (bf16[3], s32[]) tuple(m, b)
}
"""
    # A list takes the parameter's dtype; float32 is rounded to bf16 for a bf16 parameter.
    outs, _ = tpusim.run(hlo, [np.array([1.0, 1.00390625, 3.0], np.float32), 2], backend="ref")
    assert len(outs) == 2 and outs[1].dtype == np.int32 and int(outs[1]) == 2
    # 1.00390625 = 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: to even, 1.
    assert [float(x) for x in outs[0]] == [2.0, 2.0, 6.0]
    try:
        import ml_dtypes

        assert outs[0].dtype == np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        assert outs[0].dtype == np.float32


def test_float8_parameters_and_results():
    """float8 arrays cross the API as ml_dtypes' float8 types (refused before: no public code)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    hlo = """HloModule m
ENTRY e {
  a = f8e4m3fn[4] parameter(0)
  f = f32[4] convert(a)
  t = f32[4] multiply(f, f)
  c = f8e5m2[4] convert(t)
  ROOT r = (f8e5m2[4], f32[4]) tuple(c, f)
}
"""
    a = np.array([1.5, -3.0, 0.4375, 448.0], ml_dtypes.float8_e4m3fn)
    outs, _ = tpusim.run(hlo, [a], backend="ref")
    assert outs[0].dtype == np.dtype(ml_dtypes.float8_e5m2) and outs[1].dtype == np.float32
    assert [float(x) for x in outs[1]] == [1.5, -3.0, 0.4375, 448.0]
    # squares rounded to e5m2 (2 mantissa bits): 2.25 -> 2.0, 9 -> 8, 0.19140625 -> 0.1875, 200704 -> inf
    assert [float(x) for x in outs[0]] == [2.0, 8.0, 0.1875, float("inf")]


def _error(fn):
    with pytest.raises(tpusim.TpusimError) as e:
        fn()
    return e.value


def test_errors(mlp_inputs):
    bad = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] frobnicate(a)\n}\n"
    e = _error(lambda: tpusim.run(bad, [np.zeros(2, np.float32)]))
    assert str(e).startswith("<hlo>:4:") and ": error: " in str(e) and "frobnicate" in str(e)
    assert e.line == 4 and e.col > 0 and e.file == "<hlo>" and e.status in ("TPU_ERR_PARSE", "TPU_ERR_UNSUPPORTED")
    ill = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[3] add(a, a)\n}\n"
    e = _error(lambda: tpusim.load(ill))
    assert str(e).startswith("<hlo>:4:") and e.status == "TPU_ERR_INVALID"
    e = _error(lambda: tpusim.load("/nonexistent/x.hlo"))
    assert str(e).startswith("/nonexistent/x.hlo:0:0: error: cannot open the file") and e.status == "TPU_ERR_IO"
    e = _error(lambda: tpusim.run(MLP, mlp_inputs[:4]))
    assert "takes 5 parameters; 4 inputs were given" in str(e)
    wrong = list(mlp_inputs)
    wrong[1] = wrong[1][:32]
    e = _error(lambda: tpusim.run(MLP, wrong))
    assert str(e) == "error: input 1 is f32[32,128] but parameter 1 is f32[64,128] (the dimensions differ)"
    wrong[1] = mlp_inputs[1].astype(np.float64)
    e = _error(lambda: tpusim.run(MLP, wrong))
    assert str(e) == "error: input 1 is f64[64,128] but parameter 1 is f32[64,128] (the element type differ)"
    e = _error(lambda: tpusim.run(MLP, mlp_inputs, chip="v99"))
    assert "v99" in str(e) and "error:" in str(e)
    e = _error(lambda: tpusim.run(MLP, mlp_inputs, backend="gpu"))
    assert str(e) == "error: unknown backend 'gpu' (available: tpu, ref)"
    e = _error(lambda: tpusim.run(MLP, mlp_inputs, precision="max"))
    assert "unknown precision 'max'" in str(e)
    e = _error(lambda: tpusim.run(MLP, mlp_inputs, mode="timing"))
    assert "takes no inputs" in str(e)
    e = _error(lambda: tpusim.run(MLP, [x.astype(np.longdouble) for x in mlp_inputs]))
    assert str(e) == f"error: input 0 has dtype {np.dtype(np.longdouble)}, which tpusim does not take"


def test_progress_callback():
    """progress= gets (step, nsteps, loop iteration) from the run: every entry instruction once,
    in order, ending at nsteps; the loop of a scan reports its iterations."""
    import jax
    import jax.numpy as jnp

    def f(x):
        return jax.lax.fori_loop(0, 5, lambda i, c: jnp.tanh(c) + 1.0, x)

    seen = []
    out, _ = tpusim.simulate(f, np.ones((4, 4), np.float32), backend="ref", progress=lambda *a: seen.append(a))
    want = np.asarray(jax.jit(f)(np.ones((4, 4), np.float32)))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    steps = [s for s, n, it in seen if it == 0]
    n = seen[0][1]
    assert steps == sorted(steps) and steps[-1] == n
    assert [it for _, _, it in seen if it > 0] == [1, 2, 3, 4, 5]
    seen.clear()
    tpusim.simulate(f, np.ones((4, 4), np.float32), backend="ref", progress=False)
    assert seen == []


def test_tqdm_looked_up_once(monkeypatch, mlp_inputs):
    """The default progress (a bar when tqdm is installed) looks tqdm up once per process, not
    on every run: a failed import is searched for along sys.path again each time."""
    import builtins

    from tpusim import _core

    tries = []
    real = builtins.__import__

    def counting(name, *a, **k):
        if name == "tqdm":
            tries.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", counting)
    monkeypatch.setattr(_core, "_TQDM", None, raising=False)
    m = tpusim.load(MLP)
    for _ in range(3):
        m.run(mlp_inputs)
    assert len(tries) == 1


def test_input_addresses_every_kind():
    """A run reads each input at its own address however it is found: a writable array's
    buffer (the fast path), a read-only one's (a JAX array's NumPy view), a bf16 one's (no
    buffer export), a 0-d and an empty one; dtypes are looked up once (_core._CODES)."""
    from tpusim import _core

    hlo = """HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = bf16[3] parameter(1)
  s = f32[] parameter(2)
  z = f32[0] parameter(3)
  bf = f32[3] convert(b)
  bb = f32[2,3] broadcast(bf), dimensions={1}
  sb = f32[2,3] broadcast(s), dimensions={}
  m = f32[2,3] multiply(a, bb)
  y = f32[2,3] add(m, sb)
  ROOT r = (f32[2,3], f32[0]) tuple(y, z)
}
"""
    m = tpusim.load(hlo)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.0, 2.0, 4.0], np.float32)
    try:
        import ml_dtypes

        b = b.astype(ml_dtypes.bfloat16)
    except ImportError:
        pass
    want = a * np.array([1.0, 2.0, 4.0], np.float32) + np.float32(0.5)
    ro = a.copy()
    ro.flags.writeable = False
    big = np.zeros((4, 6), np.float32)
    big[1:3, 0:3] = a  # a non-contiguous view: copied first
    for x in (a, ro, a.copy(), big[1:3, 0:3]):
        outs, _ = m.run([x, b, np.float32(0.5), np.zeros(0, np.float32)], backend="ref")
        assert np.array_equal(outs[0], want) and outs[1].shape == (0,)
    assert _core._CODES[np.dtype(np.float32)] == _core.F32
