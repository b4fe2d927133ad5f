#!/bin/sh
# A Pallas kernel whose scalar operands are parameters (here its scalar-prefetch row indices)
# is timed in --mode timing without their values: the summary says so in one note line
# naming the call's place and the kernel (docs/pallas.md, "Time"); a run with the inputs
# times it on their values and prints no note.
. tests/cli/lib/preamble.sh
P=bench/pallas/corpus/gather_rows_prefetch_f32

"$BIN" run $P/prog.hlo --mode timing > "$T/out" 2>&1 || fail "timing run exited $?: $(cat "$T/out")"
grep -q "^note: $P/prog.hlo:[0-9]*:[0-9]*: Pallas kernel 'kernel' is timed without its scalar operands' values" "$T/out" ||
  fail "no note on the kernel's unknown scalars: $(cat "$T/out")"
[ "$(grep -c '^note:' "$T/out")" = 1 ] || fail "expected one note line: $(cat "$T/out")"
"$BIN" run $P/prog.hlo -i $P/in0.npy -i $P/in1.npy > "$T/out" 2>&1 || fail "full run exited $?: $(cat "$T/out")"
! grep -q "^note:" "$T/out" || fail "a note with the inputs given: $(cat "$T/out")"
"$BIN" run $P/prog.hlo --mode timing -q > "$T/out" 2>&1 || fail "quiet timing run exited $?"
[ ! -s "$T/out" ] || fail "--quiet printed: $(cat "$T/out")"
[ "$fails" = 0 ] || exit 1
