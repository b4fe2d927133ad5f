#!/bin/sh
# tpusim run with cholesky, triangular-solve and custom-call: a conformance program runs on
# both backends with the same values and is timed (MXU work, flops n^3/3 in the report);
# bad shapes and attributes, refused custom-call targets and missing targets are one line
# FILE:LINE:COL: error: ..., exit 2, no result files; under --backend tpu a refusal names
# the TPU back end, never the reference interpreter.
. tests/cli/lib/preamble.sh
C=tests/conformance/cases

# cho_factor + cho_solve (cholesky, two triangular solves) on both backends: same bits.
for be in ref tpu; do
  "$BIN" run $C/linalg_cho_solve/prog.hlo -i $C/linalg_cho_solve/in0.npy -i $C/linalg_cho_solve/in1.npy \
    --backend $be -o "$T/$be" > "$T/$be.txt" 2> "$T/err" || fail "cho_solve on $be exited $?: $(cat "$T/err")"
done
cmp -s "$T/ref/0.npy" "$T/tpu/0.npy" || fail "cho_solve values differ between backends"
grep -Eq "^step time: .* cycles" "$T/tpu.txt" || fail "tpu run printed no step time"

# A 1024 x 1024 f32 cholesky is timed with the MXU busy and n^3/3 flops.
printf 'HloModule m\nENTRY e {\n a = f32[1024,1024] parameter(0)\n ROOT c = f32[1024,1024] cholesky(a), lower=true\n}\n' > "$T/chol.hlo"
"$BIN" run "$T/chol.hlo" --mode timing --report "$T/r.json" > "$T/chol.txt" 2> "$T/err" || fail "cholesky timing: $(cat "$T/err")"
grep -Eq "^breakdown: MXU busy [1-9][0-9.]*%" "$T/chol.txt" || fail "cholesky: MXU not busy: $(grep breakdown "$T/chol.txt")"
grep -q '"flops": 357913941.33' "$T/r.json" || fail "cholesky flops are not 1024^3/3: $(grep -m1 '"flops"' "$T/r.json")"

# Errors: one line with the location, exit 2, no result directory.
check_err() { # name, hlo body, backend, expected message part, expected line:col
  printf 'HloModule m\nENTRY e {\n%b\n}\n' "$2" > "$T/$1.hlo"
  "$BIN" run "$T/$1.hlo" --backend "$3" -o "$T/o_$1" > /dev/null 2> "$T/e_$1"
  rc=$?
  [ $rc -eq 2 ] || fail "$1 ($3): exit $rc, want 2"
  [ "$(wc -l < "$T/e_$1")" -eq 1 ] || fail "$1 ($3): stderr is not one line: $(cat "$T/e_$1")"
  grep -q "^$T/$1.hlo:$5: error: .*$4" "$T/e_$1" || fail "$1 ($3): got '$(cat "$T/e_$1")', want '$5' and '$4'"
  [ -e "$T/o_$1" ] && fail "$1 ($3): result files written"
  if [ "$3" = tpu ] && grep -q "reference interpreter" "$T/e_$1"; then fail "$1: tpu message names the reference interpreter"; fi
}
for be in ref tpu; do
  check_err chol_rect " a = f32[4,3] parameter(0)\n ROOT c = f32[4,3] cholesky(a), lower=true" $be \
    "cholesky 'c': the operand f32\[4,3\] must be floating point with square minor dimensions" 4:20
  check_err chol_attr " a = f32[4,4] parameter(0)\n ROOT c = f32[4,4] cholesky(a), lower=yes" $be "lower=yes: expected true or false" 4:20
  check_err trsm_cols " a = f32[4,4] parameter(0)\n b = f32[4,2] parameter(1)\n ROOT x = f32[4,2] triangular-solve(a, b), lower=true, transpose_a=NO_TRANSPOSE" $be \
    "a is 4x4 but b's column dimension is 2 (left_side=false)" 5:20
  check_err trsm_batch " a = f32[2,4,4] parameter(0)\n b = f32[3,4,2] parameter(1)\n ROOT x = f32[3,4,2] triangular-solve(a, b), left_side=true, transpose_a=NO_TRANSPOSE" $be \
    "differ in batch dimension 0" 5:22
  check_err trsm_trans " a = f32[4,4] parameter(0)\n b = f32[4,2] parameter(1)\n ROOT x = f32[4,2] triangular-solve(a, b), left_side=true, transpose_a=T" $be \
    "transpose_a=T: expected NO_TRANSPOSE, TRANSPOSE or ADJOINT" 5:20
  check_err lapack " a = f32[4,4] parameter(0)\n ROOT c = f32[4,4] custom-call(a), custom_call_target=\"lapack_spotrf_ffi\"" $be \
    "target \"lapack_spotrf_ffi\": .* cannot run it (a CPU LAPACK call" 4:20
  check_err cpu_rt " a = f32[4,4] parameter(0)\n ROOT c = f32[4,4] custom-call(a), custom_call_target=\"__cpu\$xla.cpu.TopK\"" $be \
    "target \"__cpu\$xla.cpu.TopK\": .* cannot run it (an XLA CPU runtime call" 4:20
  check_err unknown " a = f32[4,4] parameter(0)\n ROOT c = f32[4,4] custom-call(a), custom_call_target=\"my_kernel\"" $be \
    "custom-call 'c' with target \"my_kernel\"" 4:20
  check_err no_target " a = f32[4,4] parameter(0)\n ROOT c = f32[4,4] custom-call(a)" $be "custom-call without a custom_call_target" 4:20
  check_err shard " a = f32[4,4] parameter(0)\n ROOT c = f32[2,4] custom-call(a), custom_call_target=\"SPMDShardToFullShape\"" $be \
    "target \"SPMDShardToFullShape\" changes f32\[4,4\] into f32\[2,4\] on one device" 4:20
  check_err topk " a = f32[4,4] parameter(0)\n ROOT c = (f32[4,5], s32[4,5]) custom-call(a), custom_call_target=\"TopK\"" $be \
    "target \"TopK\" must give (values, s32 indices)" 4:32
done
grep -q "the TPU back end cannot run it" "$T/e_lapack" || fail "tpu refusal does not name the TPU back end: $(cat "$T/e_lapack")"
# --mode timing (compile only) names the back end too.
"$BIN" run "$T/unknown.hlo" --mode timing > /dev/null 2> "$T/e_t"
grep -q "the TPU back end cannot run it" "$T/e_t" || fail "timing-mode refusal: $(cat "$T/e_t")"

[ $fails -eq 0 ] && echo "cli linalg: all passed"
exit $((fails > 0))
