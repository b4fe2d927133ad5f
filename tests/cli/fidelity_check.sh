#!/bin/sh
# The fidelity figures on the test split do not get worse: bench/fidelity/compare.py --check
# runs tpusim on the test-split programs of each committed corpus (the old corpus,
# bench/fidelity/corpus, in tpusim's own compilation; the held-out families corpus,
# bench/fidelity/families, in tpusim's own compilation and as the compiler compiled it) and
# fails when a generation's median or p90 |error| grows by more than max(1 point, 2 % of the
# committed value) or fewer programs are accepted than in the committed baseline
# (bench/fidelity/baseline/*.json). An improvement passes; commit the new baseline with it:
#   python3 bench/fidelity/compare.py --corpus C [--compiled] --split test --no-mem --json B --compact
# Timing only (--no-mem: tpusim's HBM footprint is not checked here).
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
check() {  # NAME CORPUS BASELINE [--compiled]
  name=$1; corpus=$2; base=$3; shift 3
  [ -f "$base" ] || { fail "$name: baseline $base missing"; return; }
  python3 bench/fidelity/compare.py --tpusim "$BIN" --corpus "$corpus" --split test --no-mem --check "$base" "$@" \
    > "$T/$name.out" 2> "$T/$name.err"
  rc=$?
  grep "^check" "$T/$name.out" | sed "s/^/  $name: /"
  [ $rc -eq 0 ] || fail "$name: compare.py --check exited $rc: $(grep '^check failed' "$T/$name.out") $(tail -3 "$T/$name.err")"
  grep -q "^check .* test accepted" "$T/$name.out" || fail "$name: no check made"
}
check corpus bench/fidelity/corpus bench/fidelity/baseline/corpus.json
check families bench/fidelity/families bench/fidelity/baseline/families.json
check families_compiled bench/fidelity/families bench/fidelity/baseline/families.compiled.json --compiled
[ $fails -eq 0 ] && echo "fidelity_check: ok"
exit $fails
