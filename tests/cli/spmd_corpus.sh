#!/bin/sh
# The SPMD corpus (tests/pod/cases: judged by XLA CPU's partitioner; tests/tpu/cases and
# bench/spmd/cases: by the XLA TPU compiler, libtpu compile-only): every case's JAX program is
# partitioned by tpusim and timed, and the compiler's final program and its partitioning
# alone run through tpusim's pipeline too (bench/spmd_compare.py); no case may fail either
# way, and the summary per judge may not get worse than the committed baseline
# (tests/cli/spmd_corpus.baseline.json: the counts of cases with the same collective kinds,
# no more bytes per chip, step within 10 % may not fall; the median and largest |difference|
# against the compiler's partitioning may not grow by more than 0.5 and 2 points; the
# geometric mean may not move by more than 0.01).
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
python3 bench/spmd_compare.py --tpusim "$BIN" tests/pod/cases tests/tpu/cases bench/spmd/cases > "$T/out" 2> "$T/err" ||
  fail "spmd_compare exited $?: $(tail -3 "$T/err")"
grep FAILED "$T/out" && fail "cases failed (above)"
n=$(ls -d bench/spmd/cases/*/ | wc -l)
[ "$n" -ge 30 ] || fail "only $n cases in bench/spmd/cases"
python3 - "$T/out" tests/cli/spmd_corpus.baseline.json <<'PY' || fail "the SPMD corpus summary is worse than its baseline (above)"
import json, re, sys
out = open(sys.argv[1]).read()
base = json.load(open(sys.argv[2]))
bad = 0
def check(ok, msg):
    global bad
    if not ok:
        print("FAIL:", msg)
        bad += 1
for who in ("TPU compiler", "XLA CPU"):
    b = base[who]
    m = re.search(r"^against %s: (\d+) of (\d+) cases timed both ways; same collective kinds (\d+)/\d+; "
                  r"bytes per chip no worse (\d+)/\d+; step time within 10 %% of its final program (\d+)/\d+, "
                  r"of its partitioning compiled by tpusim (\d+)/(\d+) .*\n  over the corpus: tpusim's step / "
                  r"its partitioning's: median \|difference\| ([0-9.]+) %%, geometric mean ([0-9.]+), "
                  r"largest \|difference\| ([0-9.]+) %%" % re.escape(who), out, re.M)
    check(m is not None, f"no summary against {who}")
    if not m:
        continue
    timed, cases, kinds, nbytes, w10, p10, npart = (int(m.group(i)) for i in range(1, 8))
    med, gm, big = float(m.group(8)), float(m.group(9)), float(m.group(10))
    print(f"{who}: {cases} cases, timed {timed}, same kinds {kinds}, bytes no worse {nbytes}, within 10 % "
          f"{w10} (final) {p10}/{npart} (partitioning); median {med} %, geomean {gm}, largest {big} %")
    check(cases == b["cases"] and timed == b["timed"] and npart == b["with_partitioning"],
          f"{who}: {cases} cases, {timed} timed, {npart} with the partitioning; the baseline has "
          f"{b['cases']}, {b['timed']}, {b['with_partitioning']} (a case added or lost: update the baseline)")
    for key, got in (("same_kinds", kinds), ("bytes_no_worse", nbytes), ("within_10pct_final", w10),
                     ("within_10pct_partitioning", p10)):
        check(got >= b[key], f"{who}: {key} {got}, baseline {b[key]}")
    check(med <= b["median_pct"] + 0.5, f"{who}: median |difference| {med} %, baseline {b['median_pct']} %")
    check(big <= b["largest_pct"] + 2, f"{who}: largest |difference| {big} %, baseline {b['largest_pct']} %")
    check(abs(gm - b["geomean"]) <= 0.01, f"{who}: geometric mean {gm}, baseline {b['geomean']}")
sys.exit(1 if bad else 0)
PY
# The held-out-style corpus (bench/spmd/corpus, bench/spmd/gen_corpus.py): per split, every
# compiled program accepted, and the counts (kinds, bytes within 10 %, step within 10 % of the
# compiler's partitioning) may not fall below the baseline's "corpus" entry.
python3 bench/spmd_compare.py --tpusim "$BIN" bench/spmd/corpus > "$T/corpus" 2> "$T/err" ||
  fail "spmd_compare on bench/spmd/corpus exited $?: $(tail -3 "$T/err")"
python3 - "$T/corpus" tests/cli/spmd_corpus.baseline.json <<'PY' || fail "bench/spmd/corpus: worse than its baseline (above)"
import json, re, sys
out = open(sys.argv[1]).read()
base = json.load(open(sys.argv[2]))["corpus"]
bad = 0
for split, b in base.items():
    m = re.search(r"^split %s: (\d+) cases; every program accepted (\d+)/\d+; collective kinds match (\d+)/\d+; "
                  r"bytes per chip within 10 %% (\d+)/\d+; step within 10 %% of the compiler's partitioning timed by "
                  r"tpusim (\d+)/\d+" % split, out, re.M)
    if not m:
        print(f"FAIL: no summary for split {split}")
        bad += 1
        continue
    got = dict(zip(("cases", "accepted", "kinds", "bytes", "step"), map(int, m.groups())))
    print(f"corpus {split}: {got}")
    if got["cases"] != b["cases"] or got["accepted"] != got["cases"]:
        print(f"FAIL: {split}: {got['cases']} cases ({got['accepted']} accepted); the baseline has {b['cases']}")
        bad += 1
    for k in ("kinds", "bytes", "step"):
        if got[k] < b[k]:
            print(f"FAIL: {split}: {k} {got[k]}, baseline {b[k]}")
            bad += 1
sys.exit(1 if bad else 0)
PY
[ $fails -eq 0 ] && echo "SPMD corpus: all cases partitioned and timed, summaries within the baseline"
exit $fails
