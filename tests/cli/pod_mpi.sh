#!/bin/sh
# tpusim run on a partitioned module under mpirun (examples/pod: XLA's SPMD output for 8
# devices): 2 and 3 ranks give the bytes one process gives, and devices that diverge fail
# over MPI too. Skipped (exit 77) without mpirun or when tpusim was built without MPI.
. tests/cli/lib/preamble.sh
P=examples/pod
IN="-i $P/mlp.a.npy -i $P/mlp.w.npy"
cat > "$T/div.hlo" <<'HLO'
HloModule m, num_partitions=4
add { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] add(a, b) }
yes { x = f32[4] parameter(0)
 ROOT r = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add }
no { ROOT x = f32[4] parameter(0) }
ENTRY e {
 p = f32[4] parameter(0)
 i = u32[] partition-id()
 z = u32[] constant(3)
 c = pred[] compare(i, z), direction=LT
 ROOT r = f32[4] conditional(c, p, p), true_computation=yes, false_computation=no
}
HLO

# 2 and 3 ranks give the one-process bytes.
command -v mpirun > /dev/null 2>&1 || { echo "skip: no mpirun"; exit 77; }
# Open MPI's plugins leave allocations LeakSanitizer reports from unloaded modules: leak
# checks stay on for the one-process runs (tests/cli/pod.sh), off for the mpirun ones.
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
export ASAN_OPTIONS
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
for n in 2 3; do
  # shellcheck disable=SC2086
  timeout 120 $MPIRUN -n $n "$BIN" run $P/mlp.hlo $IN --out-sharding @$P/mlp.shardings -o "$T/mpi$n" > "$T/mout" 2> "$T/err"
  rc=$?
  if grep -q "built without MPI" "$T/err" "$T/mout"; then
    echo "skip: tpusim built without MPI"
    exit 77
  fi
  [ $rc -eq 0 ] || { fail "mpirun -n $n exited $rc: $(head -3 "$T/err")"; continue; }
  grep -q "^mpi: $n ranks" "$T/mout" || fail "mpirun -n $n: no rank line"
  # shellcheck disable=SC2086
  "$BIN" run $P/mlp.hlo $IN --out-sharding @$P/mlp.shardings -o "$T/one" -q
  for k in 0 1 2; do cmp -s "$T/one/$k.npy" "$T/mpi$n/$k.npy" || fail "mpirun -n $n result $k differs from one process"; done
done
timeout 60 $MPIRUN -n 2 "$BIN" run "$T/div.hlo" --backend ref > /dev/null 2> "$T/err"
[ $? -ne 0 ] || fail "diverging devices over MPI did not fail"
grep -q "diverged" "$T/err" || fail "MPI divergence message: $(head -3 "$T/err")"
[ "$fails" = 0 ] || exit 1
