#!/bin/sh
# The tpusim binary does not load libmpi (its start-up is every CLI run's floor): only
# tpusim-mpi links it, and `tpusim run` under mpirun hands itself over to it (results under
# mpirun: tests/cli/pod_mpi.sh). Without a tpusim-mpi next to it, a run started under an
# MPI launcher fails with one line and exit status 2.
. tests/cli/lib/preamble.sh
command -v readelf > /dev/null 2>&1 || { echo "skip: no readelf"; exit 77; }
readelf -d "$BIN" > "$T/dyn" 2>&1 || fail "readelf -d $BIN"
if grep -q "no dynamic section" "$T/dyn"; then # linked statically (CMakeLists.txt TPU_STATIC_CLI)
  if readelf -s "$BIN" | grep -q " MPI_Init"; then fail "tpusim has MPI linked in"; fi
else
  grep -q "NEEDED.*libc\." "$T/dyn" || fail "readelf lists no libc: $(head -3 "$T/dyn")"
  if grep -q "NEEDED.*mpi" "$T/dyn"; then fail "tpusim loads MPI: $(grep NEEDED "$T/dyn" | tr '\n' ' ')"; fi
fi
# A copy alone in a folder: no tpusim-mpi to hand over to.
cp "$BIN" "$T/tpusim"
OMPI_COMM_WORLD_SIZE=2 "$T/tpusim" run examples/mlp.hlo > "$T/out" 2> "$T/err"
rc=$?
[ $rc -eq 2 ] || fail "under a launcher without tpusim-mpi: exit $rc, expected 2"
[ ! -s "$T/out" ] || fail "under a launcher without tpusim-mpi: printed $(head -2 "$T/out")"
[ "$(wc -l < "$T/err")" -eq 1 ] || fail "expected one error line: $(cat "$T/err")"
grep -q "^examples/mlp.hlo:.*: error: .*built without MPI.*tpusim-mpi" "$T/err" || fail "message: $(cat "$T/err")"
# A one-rank launcher (mpirun -n 1) is an ordinary run.
OMPI_COMM_WORLD_SIZE=1 "$T/tpusim" run examples/mlp.hlo -q > /dev/null 2> "$T/err" || fail "one rank: $(cat "$T/err")"
[ "$fails" = 0 ] || exit 1
