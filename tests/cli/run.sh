#!/bin/sh
# tpusim run: results and summary on a good program; one-line file:line:col errors, exit
# status 2 and no output files on bad programs and inputs.
. tests/cli/lib/preamble.sh

# A good run with given inputs writes one .npy per result leaf and a summary.
"$BIN" run examples/mlp.hlo -i examples/mlp.in0.npy -i examples/mlp.in1.npy -i examples/mlp.in2.npy \
  -i examples/mlp.in3.npy -i examples/mlp.in4.npy -o "$T/out" > "$T/stdout" 2> "$T/stderr" || fail "mlp run exited $?"
[ -s "$T/out/0.npy" ] || fail "mlp: no 0.npy"
grep -q "result 0: f32\[8,10\]" "$T/stdout" || fail "mlp: summary lacks the result shape"
[ -s "$T/stderr" ] && fail "mlp: unexpected stderr: $(cat "$T/stderr")"
# (the values against JAX's, examples/mlp.out0.npy: test_api test_mlp)

# Random inputs are reproducible from --seed and differ between seeds.
"$BIN" run examples/mlp.hlo --seed 7 -o "$T/s7a" > /dev/null || fail "seed run"
"$BIN" run examples/mlp.hlo --seed 7 -o "$T/s7b" > /dev/null || fail "seed run"
"$BIN" run examples/mlp.hlo --seed 8 -o "$T/s8" > /dev/null || fail "seed run"
cmp -s "$T/s7a/0.npy" "$T/s7b/0.npy" || fail "same seed, different results"
cmp -s "$T/s7a/0.npy" "$T/s8/0.npy" && fail "different seeds, same results"

# expect_error NAME PATTERN CMD...: exit status 2, exactly one stderr line matching PATTERN,
# nothing written to the output directory.
expect_error() {
  name="$1"; pat="$2"; shift 2
  rm -rf "$T/err"
  "$@" > "$T/so" 2> "$T/se"
  rc=$?
  [ "$rc" = 2 ] || fail "$name: exit status $rc, want 2"
  [ "$(wc -l < "$T/se")" = 1 ] || fail "$name: stderr has $(wc -l < "$T/se") lines: $(cat "$T/se")"
  grep -Eq "$pat" "$T/se" || fail "$name: stderr '$(cat "$T/se")' does not match '$pat'"
  if [ -d "$T/err" ] && [ -n "$(ls -A "$T/err")" ]; then fail "$name: partial output written"; fi
}

bad() { printf '%s\n' "$2" > "$T/$1.hlo"; }

bad syntax 'HloModule m

ENTRY e {
  x = f32[4]{0} parameter(0)
  ROOT y = f32[4]{0} negate(x
}'
expect_error syntax "^$T/syntax.hlo:6:1: error: " "$BIN" run "$T/syntax.hlo" -o "$T/err"

bad unknown_op 'HloModule m
ENTRY e {
  x = f32[4]{0} parameter(0)
  ROOT y = f32[4]{0} frobnicate(x)
}'
expect_error unknown_op "unknown_op.hlo:4:22: error: unknown opcode 'frobnicate'" "$BIN" run "$T/unknown_op.hlo" -o "$T/err"

bad unknown_operand 'HloModule m
ENTRY e {
  x = f32[4]{0} parameter(0)
  ROOT y = f32[4]{0} negate(z)
}'
expect_error unknown_operand "unknown_operand.hlo:4:29: error: unknown operand 'z'" "$BIN" run "$T/unknown_operand.hlo" -o "$T/err"

bad overflow 'HloModule m
ENTRY e {
  ROOT x = f32[4294967296,4294967296,4294967296]{2,1,0} parameter(0)
}'
expect_error overflow "overflow.hlo:3:12: error: shape size overflows" "$BIN" run "$T/overflow.hlo" -o "$T/err"

bad recursion 'HloModule m
f {
  p = f32[] parameter(0)
  ROOT c = f32[] call(p), to_apply=f
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT y = f32[] call(x), to_apply=f
}'
expect_error recursion "recursion.hlo:[0-9]+:[0-9]+: error: .*calls itself" "$BIN" run "$T/recursion.hlo" -o "$T/err"

bad cycle 'HloModule m
ENTRY e {
  a = f32[] negate(b)
  ROOT b = f32[] negate(a)
}'
expect_error cycle "cycle.hlo:[0-9]+:[0-9]+: error: .*depends on itself" "$BIN" run "$T/cycle.hlo" -o "$T/err"

bad badconst 'HloModule m
ENTRY e {
  ROOT c = s8[2]{0} constant({1, 300})
}'
expect_error badconst "badconst.hlo:3:34: error: constant 300 is out of range for s8" "$BIN" run "$T/badconst.hlo" -o "$T/err"
printf 'HloModule m\nENTRY e {\n  ROOT c = f32[2,50] constant({ {...}, {1} })\n}\n' > "$T/elided.hlo"
expect_error elided "elided.hlo:3:34: error: the constant's values are elided .*print_large_constants=true" "$BIN" run "$T/elided.hlo" -o "$T/err"
printf 'HloModule m\nENTRY e {\n  ROOT c = f32[100] constant({...})\n}\n' > "$T/elided1.hlo"
expect_error elided1 "elided1.hlo:3:31: error: the constant's values are elided" "$BIN" run "$T/elided1.hlo" -o "$T/err"

bad branches 'HloModule m
b0 {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(i, x), branch_computations={b0}, false_computation=b0
}'
expect_error branches "branches.hlo:9:[0-9]+: error: conditional gives both" "$BIN" run "$T/branches.hlo" -o "$T/err"

printf 'HloModule m\nENTRY e {\n  x = f32[4]{0} parameter(0)\n  ROOT y = f32[4]{0} negate(x)\n}\n' > "$T/neg.hlo"
expect_error missing_file "nope.hlo:0:0: error: cannot open" "$BIN" run "$T/nope.hlo" -o "$T/err"
expect_error input_count "takes 1 parameters; 2 inputs" "$BIN" run "$T/neg.hlo" -i examples/mlp.in0.npy -i examples/mlp.in0.npy -o "$T/err"
expect_error input_shape "mlp.in0.npy:0:0: error: input 0 is f32\[8,64\] but parameter 0 is f32\[4\]\{0\}" "$BIN" run "$T/neg.hlo" -i examples/mlp.in0.npy -o "$T/err"
printf 'not a numpy file at all' > "$T/junk.npy"
expect_error bad_npy "junk.npy.*error: " "$BIN" run "$T/neg.hlo" -i "$T/junk.npy" -o "$T/err"
expect_error bad_option "^<command line>:3:1: error: unknown option '--frob'" "$BIN" run "$T/neg.hlo" --frob
expect_error bad_backend "unknown backend 'gpu'" "$BIN" run "$T/neg.hlo" --backend gpu
expect_error no_program "error: no program given" "$BIN" run

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all cli run checks passed"
