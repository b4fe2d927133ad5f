"""The examples run: examples/notebook.py (a notebook in percent format) top to bottom, and
the training examples for a few steps (their full runs are measured in examples/README.md)."""
import os
import runpy
import sys

import pytest

from conftest import EX

jax = pytest.importorskip("jax")


@pytest.fixture
def examples_path(monkeypatch):
    monkeypatch.syspath_prepend(EX)
    yield EX
    sys.modules.pop("trainlib", None)


def test_notebook_runs(monkeypatch, capsys):
    monkeypatch.setenv("TPUSIM_NOTEBOOK_STEPS", "6")
    g = runpy.run_path(os.path.join(EX, "notebook.py"), run_name="__main__")
    assert len(g["losses"]) == 6 and g["losses"][-1] < g["losses"][0]
    assert g["step"].clock.steps == 6
    out = capsys.readouterr().out
    assert "v5e: step" in out and "v5p: step" in out


def test_train_mlp_digits_few_steps(examples_path, capsys):
    pytest.importorskip("sklearn")
    mod = runpy.run_path(os.path.join(examples_path, "train_mlp_digits.py"), run_name="example")
    rows = mod["main"](["--steps", "4", "--batch", "32", "--hidden", "32", "--no-plot"])
    assert [r["run"] for r in rows] == ["tpusim v5e", "tpusim v5p", "JAX CPU"]
    e, p, cpu = rows
    # both timed; which chip is faster on this tiny step depends on per-kernel overheads
    assert e["step_s"] > 0 and p["step_s"] > 0 and e["step_s"] != p["step_s"]
    assert abs(e["final"] - cpu["final"]) < 0.05
    assert "losses bit-identical: True" in capsys.readouterr().out


def test_train_lm_few_steps(examples_path, capsys):
    mod = runpy.run_path(os.path.join(examples_path, "train_lm.py"), run_name="example")
    rows = mod["main"](["--steps", "2", "--batch", "2", "--context", "16", "--d-model", "32", "--layers", "1",
                        "--chips", "v5e", "--sample-chars", "4", "--no-plot"])
    assert [r["run"] for r in rows] == ["tpusim v5e", "JAX CPU"]
    assert abs(rows[0]["final"] - rows[1]["final"]) < 0.05
    assert "held-out loss" in capsys.readouterr().out
