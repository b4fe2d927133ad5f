"""Fuzz target for the planner's model files (tools/plan/plan.py load_model), with atheris
(a coverage-guided Python fuzzer on libFuzzer; pip install atheris). Any bytes must give a
model within the documented limits or an InputError of one located line
`fuzz.json:LINE:COL: error: ...` as the planner prints it (escaped), an unknown field
located at its key; any other exception is a bug. Built and run by
scripts/fuzz like the C targets (libFuzzer flags: -max_total_time=N, a corpus folder)."""
import os
import re
import sys

import atheris

with atheris.instrument_imports():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "plan"))
    import plan

LINE = re.compile(r"fuzz\.json:\d+:\d+: error: [^\n]+\Z")


def one(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        m = plan.load_model("fuzz.json", text)
    except plan.InputError as e:
        line = plan.cmdline.escape(str(e))  # as the planner prints it
        if not LINE.match(line):
            raise AssertionError(f"not one located line: {line!r}")
        if line.startswith("fuzz.json:1:1: error: unknown field"):
            raise AssertionError(f"an unknown field not located at its key: {line!r}")
        return
    for k, lim in plan.LIMITS.items():
        if k in m and not (0 <= m[k] <= lim):
            raise AssertionError(f"{k} = {m[k]!r} accepted beyond its limit")
    plan.gen.param_count(m)  # the first computation a plan makes with the model


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
