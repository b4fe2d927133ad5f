#!/bin/sh
# The SPMD fidelity corpus (bench/spmd/cases: sharded programs at training sizes, generated
# by hand with libtpu): every case's JAX program is partitioned by tpusim and timed, and the
# TPU compiler's final program and its partitioning alone run through tpusim's pipeline too
# (bench/spmd_compare.py); no case may fail either way.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
python3 bench/spmd_compare.py --tpusim "$BIN" bench/spmd/cases > "$T/out" 2> "$T/err" ||
  fail "spmd_compare exited $?: $(tail -3 "$T/err")"
grep FAILED "$T/out" && fail "cases failed (above)"
n=$(ls -d bench/spmd/cases/*/ | wc -l)
grep -q "^against TPU compiler: $n of $n cases timed both ways;.* of its partitioning compiled by tpusim [0-9]*/$n " "$T/out" ||
  fail "not all $n cases timed with the compiler's partitioning: $(grep '^against' "$T/out")"
[ "$n" -ge 30 ] || fail "only $n cases"
[ $fails -eq 0 ] && echo "SPMD corpus: $n programs partitioned and timed; $(grep '^against' "$T/out" | cut -c1-200)"
exit $fails
