"""A module of 8 devices (examples/pod/mlp: XLA's SPMD partitioning of a tanh layer over a
2 x 4 mesh): global arrays in, global arrays out, against JAX's results."""
import os

import numpy as np
import pytest

import tpusim
from conftest import EX, REPO

P = os.path.join(EX, "pod")


@pytest.fixture
def pod():
    with open(os.path.join(P, "mlp.shardings")) as f:
        sh = [line.strip() for line in f if line.strip()]
    ins = [np.load(os.path.join(P, "mlp.a.npy")), np.load(os.path.join(P, "mlp.w.npy"))]
    want = [np.load(os.path.join(P, f"mlp.out{k}.npy")) for k in range(3)]
    return sh, ins, want


# Per output (the layer's tanh, peaking at 1.0; its gradient, 5.45; the mean, 0.0258), a few
# times the error measured against JAX's f32 results: f32 arithmetic 0.9e-6 / 1.1e-6 / 0 (the
# reference and --precision highest); default precision, one bf16 MXU pass, 0.024 / 0.024 / 0
# (the mean does not go through the MXU).
@pytest.mark.parametrize("backend,precision,tol", [("ref", None, [3e-6, 3e-6, 1e-6]),
                                                   ("tpu", "highest", [3e-6, 3e-6, 1e-6]),
                                                   ("tpu", None, [5e-2, 5e-2, 1e-6])])
def test_pod_matches_jax(pod, backend, precision, tol):
    sh, ins, want = pod
    m = tpusim.load(os.path.join(P, "mlp.hlo"))
    assert m.devices == 8
    assert [p.shape for p in m.params] == [(16, 32), (32, 24)]  # global shapes from the shardings
    outs, rep = m.run(ins, backend=backend, precision=precision, out_shardings=sh)
    assert [o.shape for o in outs] == [w.shape for w in want]
    for o, w, t in zip(outs, want, tol):
        np.testing.assert_allclose(o, w, rtol=0, atol=t)
    if backend == "tpu":
        assert rep.devices == 8 and rep.ici_bytes > 0 and rep.breakdown["ici_wait"] > 0
        assert any(o["kind"] == "all-reduce" or "all-reduce" in o["name"] for o in rep.ops)


def test_pod_stacked_without_shardings(pod):
    _, ins, want = pod
    outs, _ = tpusim.run(os.path.join(P, "mlp.hlo"), ins, backend="ref")
    assert outs[0].shape == (8, 8, 6)  # one row per device
    assert float(outs[2][3]) == pytest.approx(float(want[2]), abs=1e-6)


def test_pod_timing_and_bad_sharding(pod):
    sh, ins, _ = pod
    _, full = tpusim.run(os.path.join(P, "mlp.hlo"), ins, out_shardings=sh)
    _, timing = tpusim.run(os.path.join(P, "mlp.hlo"), mode="timing")
    assert timing.cycles == full.cycles
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(os.path.join(P, "mlp.hlo"), ins, backend="ref", out_shardings="{devices=[3]<=[3]}")
    assert "error:" in str(e.value) and "sharding" in str(e.value)


def test_pod_report_same_as_cli(pod, cli, tmp_path):
    """The pod's JSON report (with its "pod" section) and values equal `tpusim run`'s."""
    import json
    import subprocess

    sh, ins, _ = pod
    hlo = os.path.join(P, "mlp.hlo")
    subprocess.run([cli, "run", hlo, "-i", os.path.join(P, "mlp.a.npy"), "-i", os.path.join(P, "mlp.w.npy"),
                    "--out-sharding", "@" + os.path.join(P, "mlp.shardings"), "-o", str(tmp_path / "o"),
                    "--report", str(tmp_path / "cli.json"), "-q"], check=True)
    outs, rep = tpusim.run(hlo, ins, out_shardings=sh)
    for k, o in enumerate(outs):
        assert np.array_equal(o, np.load(tmp_path / "o" / f"{k}.npy"))
    rep.save_json(tmp_path / "api.json")
    with open(tmp_path / "cli.json") as f:
        cj = json.load(f)
    with open(tmp_path / "api.json") as f:
        aj = json.load(f)
    assert "pod" in cj and aj == cj


def test_pod_topology_and_slices(pod, cli):
    """topology/slices time the collectives on that slice, as `tpusim run --topology` does:
    two slices of 4 chips joined by DCN are slower than one 2x4 slice; a topology that does not
    hold the devices is an error."""
    import json
    import subprocess

    path = os.path.join(P, "mlp.hlo")
    _, one = tpusim.run(path, mode="timing", topology="2x4")
    _, two = tpusim.run(path, mode="timing", topology="2x2", slices=2)
    assert two.cycles > one.cycles
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        subprocess.run([cli, "run", path, "--mode", "timing", "--topology", "2x2", "--slices", "2", "-q",
                        "--report", os.path.join(t, "r.json")], check=True)
        two.save_json(os.path.join(t, "api.json"))
        with open(os.path.join(t, "r.json")) as f, open(os.path.join(t, "api.json")) as g:
            assert json.load(f) == json.load(g)
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(path, mode="timing", topology="4x4")
    assert "has 16 devices but the program runs on 8" in str(e.value)


def test_multislice_program_from_libtpu(cli, tmp_path):
    """One slice's program from the TPU compiler (tests/pod/megascale/prog.hlo: psum,
    all_gather and ppermute over two v5e 2x2 slices as send/recv pairs to the megascale
    runtime) runs with slices=2 as `tpusim run --slices 2` does: widened to 8 devices, JAX's
    values bit for bit, the CLI's report; without slices, one line saying to give them."""
    import json
    import subprocess

    m_dir = os.path.join(REPO, "tests", "pod", "megascale")
    hlo = os.path.join(m_dir, "prog.hlo")
    with open(os.path.join(m_dir, "shardings")) as f:
        sh = [line.strip() for line in f if line.strip()]
    x = np.load(os.path.join(m_dir, "x.npy"))
    outs, rep = tpusim.run(hlo, [x], chip="v5e", precision="highest", slices=2, out_shardings=sh)
    for k, o in enumerate(outs):
        assert np.array_equal(o, np.load(os.path.join(m_dir, f"out{k}.npy"))), k
    assert rep.devices == 8
    m = tpusim.load(hlo)  # one slice's 4 devices until a run widens it: then the run's 8
    assert m.devices == 4
    _, rep_m = m.run(mode="timing", chip="v5e", slices=2)
    assert rep_m.devices == 8 and m.devices == 8 and "8 device(s)" in repr(m)
    subprocess.run([cli, "run", hlo, "--slices", "2", "--chip", "v5e", "--precision", "highest", "-i",
                    os.path.join(m_dir, "x.npy"), "--out-sharding", "@" + os.path.join(m_dir, "shardings"),
                    "-q", "--report", str(tmp_path / "cli.json")], check=True)
    rep.save_json(tmp_path / "api.json")
    with open(tmp_path / "cli.json") as f, open(tmp_path / "api.json") as g:
        cj, aj = json.load(f), json.load(g)
    assert aj == cj and len([c for c in cj["pod"]["collectives"] if c.get("dcn_slices") == 2]) == 3
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(hlo, mode="timing", chip="v5e")
    assert "exchanges data between slices over the megascale runtime" in str(e.value)


def test_pod_call_on_arrays_equals_run(pod):
    """A module of 8 devices on tpusim.Arrays (global arrays, cut by the shardings in the
    library): the same bits and report as the NumPy path."""
    sh, ins, _ = pod
    m = tpusim.load(os.path.join(P, "mlp.hlo"))
    want, rep_n = m.run(ins, out_shardings=sh, progress=False)
    a = [tpusim.device_put(x) for x in ins]
    got, rep_b = m.call(a, donate=[0], out_shardings=sh, progress=False)
    assert a[0].is_deleted() and not a[1].is_deleted()
    assert all(isinstance(g, tpusim.Array) for g in got)
    for g, w in zip(got, want):
        assert np.asarray(g).tobytes() == w.tobytes()
    assert rep_b.cycles == rep_n.cycles and rep_b.devices == 8


def test_windowed_einsum_switch(cli):
    """FSDP over every chip of a v5e 2x4 slice (bench/spmd fsdp_mlp_step): by default the
    weights pass round the ring as the XLA TPU compiler's windowed einsums (collective-permutes,
    no gather of the first weight); windowed_einsum=False gathers and reduce-scatters. Step
    times equal `tpusim run`'s with and without --no-windowed-einsum."""
    import re
    import subprocess

    hlo = os.path.join(os.path.dirname(EX), "bench", "spmd", "cases", "fsdp_mlp_step", "prog.hlo")
    kinds = {}
    for on in (True, False):
        _, rep = tpusim.run(hlo, mode="timing", chip="v5e", windowed_einsum=on)
        kinds[on] = {o["kind"] for o in rep.ops}
        cmd = [cli, "run", hlo, "--mode", "timing", "--chip", "v5e"] + ([] if on else ["--no-windowed-einsum"])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        assert int(re.search(r"\((\d+) cycles", out).group(1)) == rep.cycles
    assert "collective-permute" in kinds[True] and "reduce-scatter" not in kinds[True]
    assert "collective-permute" not in kinds[False] and "reduce-scatter" in kinds[False]
