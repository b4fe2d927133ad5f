#!/bin/sh
# tpusim run's disk cache (src/api/diskcache.c): a warm run prints and writes exactly what a
# cold run does (timing and full mode, a pod, an SPMD program, loops with trip counts from
# the values); the key changes with the chip, the precision and the program; a corrupt entry
# is reported, ignored and rebuilt; an entry of another format version is a silent miss;
# concurrent writers leave one whole entry; a rule's TPUSIM_NO_* switch is in the key; the size bound removes the oldest entries; the
# loaded chip is an entry of its own (a warm run reads it back instead of parsing the chip's
# JSON), keyed by its file's bytes;
# --no-cache and TPUSIM_CACHE=0 neither read nor write.
. tests/cli/lib/preamble.sh
C="$T/cache"
export TPUSIM_CACHE_LOG=1
unset TPUSIM_CACHE TPUSIM_CACHE_MAX_MB
entries() { find "$C" -name '*.tpc' | wc -l | tr -d ' '; }
# the number of cache hits a run's stderr reports
hits() { grep -c "^tpusim: cache hit " "$T/$1.err"; }
# drops the one line that carries the host's time for the values
nohost() { grep -v '^backend tpu: .* of host time$' "$1"; }

# run NAME ARGS...: a run with the cache at $C; stdout, stderr, report and trace under $T/NAME.*
run() {
  n="$1"
  shift
  "$BIN" run "$@" --cache-dir "$C" --report "$T/$n.json" --trace "$T/$n.trace" > "$T/$n.out" 2> "$T/$n.err" ||
    fail "$n: exited $?: $(cat "$T/$n.err")"
}
# same NAME1 NAME2: identical stdout (less the host time), report and trace
same() {
  nohost "$T/$1.out" > "$T/$1.o"
  nohost "$T/$2.out" > "$T/$2.o"
  cmp -s "$T/$1.o" "$T/$2.o" || fail "$1 and $2 print differently: $(diff "$T/$1.o" "$T/$2.o" | head -5)"
  cmp -s "$T/$1.json" "$T/$2.json" || fail "$1 and $2 write different reports"
  cmp -s "$T/$1.trace" "$T/$2.trace" || fail "$1 and $2 write different traces"
}
says() { grep -q "^tpusim: cache $2 " "$T/$1.err" || fail "$1: no 'cache $2' on stderr: $(cat "$T/$1.err")"; }

MLP="examples/mlp.hlo -i examples/mlp.in0.npy -i examples/mlp.in1.npy -i examples/mlp.in2.npy -i examples/mlp.in3.npy -i examples/mlp.in4.npy"
i=0
# shellcheck disable=SC2086
for prog in "examples/transformer_step.hlo --mode timing" "examples/mlp.hlo --mode timing --chip v5p" \
  "$MLP" "examples/spmd/block_3d.hlo --mode timing --chip v5p" \
  "tests/programs/cases/equinox_gru_scan/opt.hlo" "tests/programs/cases/flax_lstm_adam/opt.hlo --precision highest" \
  "examples/pod/dp64.hlo --mode timing"; do
  i=$((i + 1))
  run "cold$i" $prog --no-cache
  [ -s "$T/cold$i.json" ] || fail "cold$i: no report"
  run "first$i" $prog
  says "first$i" miss
  says "first$i" stored
  run "warm$i" $prog
  says "warm$i" hit
  [ "$(hits "warm$i")" = 2 ] || fail "warm$i: $(hits "warm$i") cache hits, not 2 (the chip, the timing)"
  grep -q "stored" "$T/warm$i.err" && fail "warm$i: stored again"
  same "cold$i" "first$i"
  same "cold$i" "warm$i"
done
[ "$(entries)" = 9 ] || fail "7 programs on 2 chips left $(entries) entries"
# full mode: the values written by -o are the same on a hit
# shellcheck disable=SC2086
"$BIN" run $MLP --cache-dir "$C" -o "$T/v1" > /dev/null 2>&1 || fail "mlp -o"
# shellcheck disable=SC2086
"$BIN" run $MLP --cache-dir "$C" -o "$T/v2" > /dev/null 2> "$T/v2.err" || fail "mlp -o (warm)"
grep -q "cache hit" "$T/v2.err" || fail "the second -o run missed"
cmp -s "$T/v1/0.npy" "$T/v2/0.npy" || fail "values differ on a hit"

# another chip, precision or program text: another key
run chip examples/transformer_step.hlo --mode timing --chip v4
says chip miss
run prec examples/transformer_step.hlo --mode timing --precision highest
says prec miss
sed 's/^HloModule \([A-Za-z0-9_.]*\)/HloModule \1_renamed/' examples/mlp.hlo > "$T/mlp2.hlo"
cmp -s examples/mlp.hlo "$T/mlp2.hlo" && fail "the renamed copy is the same text"
run text "$T/mlp2.hlo" --mode timing --chip v5p
says text miss

# a rule's switch in the environment (TPUSIM_NO_*): another key, and the run prints what an
# uncached run with the switch prints (here a reduce over a dimension of one element, an
# elementwise kernel by rule, a reduce kernel without it); the caches' own variables
# (TPUSIM_CACHE_LOG, set throughout) are not in the key
printf '%s\n' 'HloModule unitred' 'add {' '  a = f32[] parameter(0)' '  b = f32[] parameter(1)' \
  '  ROOT s = f32[] add(a, b)' '}' 'ENTRY e {' '  p = f32[1024,1,512] parameter(0)' '  z = f32[] constant(0)' \
  '  ROOT r = f32[1024,512] reduce(p, z), dimensions={1}, to_apply=add' '}' > "$T/unitred.hlo"
run sw1 "$T/unitred.hlo" --mode timing
says sw1 stored
export TPUSIM_NO_UNIT_REDUCE=1
run sw2 "$T/unitred.hlo" --mode timing
says sw2 miss
run sw3 "$T/unitred.hlo" --mode timing --no-cache
same sw2 sw3
cmp -s "$T/sw1.json" "$T/sw2.json" && fail "the switch changed nothing: the test needs a program the rule moves"
run sw4 "$T/unitred.hlo" --mode timing
says sw4 hit
unset TPUSIM_NO_UNIT_REDUCE
run sw5 "$T/unitred.hlo" --mode timing
says sw5 hit
same sw1 sw5

# an edited chip file: its new bytes miss, and the run times the new chip
cp chips/v5e.json "$T/edit.json"
run ed1 examples/mlp.hlo --mode timing --chip "$T/edit.json"
run ed2 examples/mlp.hlo --mode timing --chip "$T/edit.json"
[ "$(hits ed2)" = 2 ] || fail "ed2: $(hits ed2) cache hits, not 2"
same ed1 ed2
sed 's/"hbm_bw": *{"value": 819e9/"hbm_bw": {"value": 409.5e9/' chips/v5e.json > "$T/edit.json"
cmp -s chips/v5e.json "$T/edit.json" && fail "the edited chip is the same text"
run ed3 examples/mlp.hlo --mode timing --chip "$T/edit.json"
[ "$(hits ed3)" = 0 ] || fail "ed3: the edited chip hit the cache"
cmp -s "$T/ed1.json" "$T/ed3.json" && fail "the edited chip's report equals the first chip's"
run ed4 examples/mlp.hlo --mode timing --chip "$T/edit.json" --no-cache
same ed3 ed4

# a corrupt entry: a warning, the same output, and a whole entry again afterwards
f=$(grep "cache hit" "$T/warm1.err" | tail -n 1 | sed 's/^tpusim: cache hit //') # the timing's (after the chip's)
[ -f "$f" ] || fail "no entry file named on stderr"
size=$(wc -c < "$f")
printf 'XXXXXXXX' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
run corrupt examples/transformer_step.hlo --mode timing
grep -q "warning: cache entry .* is corrupt (bad checksum)" "$T/corrupt.err" || fail "no corrupt warning: $(cat "$T/corrupt.err")"
says corrupt stored
same cold1 corrupt
run again examples/transformer_step.hlo --mode timing
says again hit
grep -q warning "$T/again.err" && fail "the rebuilt entry is still corrupt"
head -c 100 "$f" > "$T/short" && cp "$T/short" "$f" # truncated
run trunc examples/transformer_step.hlo --mode timing
grep -q "is corrupt (bad lengths)" "$T/trunc.err" || fail "no warning for a truncated entry: $(cat "$T/trunc.err")"
same cold1 trunc
printf 'garbage' > "$f"
run garbage examples/transformer_step.hlo --mode timing
grep -q "is corrupt (not a tpusim cache entry)" "$T/garbage.err" || fail "no warning for garbage"
same cold1 garbage
# another format version: a miss without a warning, then rewritten
printf '\143' | dd of="$f" bs=1 seek=8 conv=notrunc 2> /dev/null
run version examples/transformer_step.hlo --mode timing
says version miss
grep -q warning "$T/version.err" && fail "another version's entry warned"
says version stored
same cold1 version

# concurrent writers of one key: all succeed with the same output, one whole entry of each
# key remains (the chip's and the timing's)
C2="$T/cache2"
for k in 1 2 3 4; do
  "$BIN" run examples/transformer_step.hlo --mode timing --cache-dir "$C2" > "$T/par$k.out" 2> "$T/par$k.err" &
done
wait
for k in 1 2 3 4; do
  cmp -s "$T/par1.out" "$T/par$k.out" || fail "concurrent run $k printed differently"
done
[ "$(find "$C2" -type f | wc -l | tr -d ' ')" = 2 ] || fail "concurrent writers left $(find "$C2" -type f | wc -l) files"
"$BIN" run examples/transformer_step.hlo --mode timing --cache-dir "$C2" > /dev/null 2> "$T/par.err"
grep -q "cache hit" "$T/par.err" || fail "no hit after concurrent writers: $(cat "$T/par.err")"

# the size bound: the least recently used entries go first. The bound is two and a half
# entries of this program (an entry's size follows the compiled program's), so two fit.
C3="$T/cache3"
"$BIN" run examples/mlp.hlo --mode timing --chip v4 --cache-dir "$T/cache_one" > /dev/null 2>&1
one=$(find "$T/cache_one" -name '*.tpc' -exec cat {} + | wc -c)
[ "$one" -gt 0 ] || fail "no entry written to measure"
mb=$(awk -v b="$one" 'BEGIN { printf "%.6f", 2.5 * b / 1048576 }')
bound=$(awk -v m="$mb" 'BEGIN { printf "%d", m * 1048576 }')
for ch in v4 v5e v5p v6e; do
  TPUSIM_CACHE_MAX_MB=$mb "$BIN" run examples/mlp.hlo --mode timing --chip $ch --cache-dir "$C3" > /dev/null 2>&1
  sleep 0.02 # distinct modification times
done
total=$(find "$C3" -name '*.tpc' -exec cat {} + | wc -c)
[ "$total" -le "$bound" ] || fail "the cache holds $total bytes over its bound of $bound"
[ "$(find "$C3" -name '*.tpc' | wc -l)" -ge 2 ] || fail "the bound removed more entries than it needed"
TPUSIM_CACHE_MAX_MB=$mb "$BIN" run examples/mlp.hlo --mode timing --chip v6e --cache-dir "$C3" > /dev/null 2> "$T/b.err"
grep -q "cache hit" "$T/b.err" || fail "the newest entry was removed"

# off switches
n0=$(entries)
"$BIN" run examples/attention.hlo --mode timing --cache-dir "$C" --no-cache > /dev/null 2> "$T/off.err"
TPUSIM_CACHE=0 "$BIN" run examples/attention.hlo --mode timing --cache-dir "$C" > /dev/null 2>> "$T/off.err"
[ -s "$T/off.err" ] && fail "the cache ran while off: $(cat "$T/off.err")"
[ "$(entries)" = "$n0" ] || fail "the cache was written while off"
# a folder that cannot be made: a warning, and the run goes on
touch "$T/file"
"$BIN" run examples/mlp.hlo --mode timing --cache-dir "$T/file/sub" > "$T/nf.out" 2> "$T/nf.err" || fail "run with a bad folder failed"
grep -q "warning: cache folder .*; running without the cache" "$T/nf.err" || fail "no warning for a bad folder"
[ "$fails" = 0 ] || exit 1
