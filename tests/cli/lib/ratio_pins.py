"""Pins of tpusim's program time over the XLA TPU compiler's (compare.py --json rows), shared by
tests/cli/fidelity.sh and tests/cli/fidelity_rules.sh."""
import json

CHIPS = ("v4", "v5e", "v5p", "v6e")


def failures(rows, want, tol=0.05):
    """Rows whose tpusim / compiler ratio is off its pinned value (want: name -> one ratio per
    chip of CHIPS) by more than tol, each printed; their count."""
    bad = 0
    for x in rows:
        w = want[x["name"]][CHIPS.index(x["chip"])]
        got = x["tpusim_s"] / x["compiler_s"]
        if abs(got / w - 1) > tol:
            print("FAIL: %s on %s: tpusim / compiler %.3f, measured %.3f" % (x["name"], x["chip"], got, w))
            bad += 1
    return bad


def report_failures(path, want, tol=0.05):
    """failures() over a compare.py --json report (path) holding every pinned program of want
    on each chip of CHIPS and no failed run (asserted)."""
    r = json.load(open(path))
    rows = [x for x in r["rows"] if x["name"] in want]
    assert len(rows) == 4 * len(want) and not r["failures"], (len(rows), r["failures"])
    return failures(rows, want, tol)
