#!/bin/sh
# Bad input is refused cleanly (docs/errors.md): every case of tests/bad/cases.txt exits with
# its status (2: bad input; 1: results cannot be written), prints exactly one located line
# on stderr (FILE:LINE:COL, FILE:0:BYTE or <command line>:N:COL) with no raw control byte,
# and leaves no file behind. Then: large constants parse in linear time; results are
# written as a set (a failed run leaves no earlier results, kill -9 never leaves a mix).
BIN=${1:?usage: bad.sh TPUSIM}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
D=tests/bad
have_py=0
command -v python3 >/dev/null 2>&1 && have_py=1
ncases=0
skipped=0

while IFS='|' read -r name code expect args; do
  name=$(printf '%s\n' "$name" | sed 's/^ *//; s/ *$//')
  case "$name" in '' | '#'*) continue ;; esac
  code=$(printf '%s\n' "$code" | tr -d ' ')
  expect=$(printf '%s\n' "$expect" | sed 's/^ *//; s/ *$//' | sed "s|@D|$D|g")
  W="$T/w"
  rm -rf "$W"
  mkdir "$W"
  args=$(printf '%s\n' "$args" | sed "s|@D|$D|g; s|@T|$W|g")
  case "$args" in *plan*) if [ $have_py = 0 ]; then skipped=$((skipped + 1)); continue; fi ;; esac
  ncases=$((ncases + 1))
  eval "set -- $args"
  timeout 120 "$BIN" "$@" > "$T/so" 2> "$T/se" < /dev/null
  rc=$?
  [ "$rc" = "$code" ] || { fail "$name: exit status $rc, want $code ($(head -c 300 "$T/se"))"; continue; }
  [ "$(wc -l < "$T/se")" = 1 ] || fail "$name: stderr has $(wc -l < "$T/se") lines: $(head -c 300 "$T/se")"
  grep -Eq '^(<command line>|[^ ]+):[0-9]+:[0-9]+: error: ' "$T/se" || fail "$name: not a located error line: $(cat "$T/se")"
  grep -Eq "^$expect" "$T/se" || fail "$name: '$(cat "$T/se")' does not start with '$expect'"
  LC_ALL=C grep -q '[[:cntrl:]]' "$T/se" && fail "$name: a raw control byte in '$(cat -v "$T/se")'"
  [ -z "$(ls -A "$W")" ] || fail "$name: left files behind: $(ls -A "$W" | head -5 | tr '\n' ' ')"
done < $D/cases.txt
[ $ncases -ge 85 ] || fail "only $ncases cases ran"
echo "bad inputs: $ncases cases refused as they should be ($skipped skipped: no python3)"

# Standard output that cannot be written (a full disk): exit 1 and one located line.
if [ -w /dev/full ]; then
  "$BIN" fmt $D/ok.hlo > /dev/full 2> "$T/se"
  rc=$?
  [ $rc = 1 ] && [ "$(wc -l < "$T/se")" = 1 ] && grep -q '^<standard output>:0:0: error: cannot write' "$T/se" ||
    fail "fmt > /dev/full: exit $rc, '$(cat "$T/se")'"
fi

# Large constants: the parser locates each element from the previous one, not from the
# start of the text (which was quadratic: 200,000 elements took 47 s). 1,000,000 elements
# (4 MB) must parse within the timeout even on the sanitizer build.
awk 'BEGIN { n = 1000000; printf "HloModule big\nENTRY e {\n  ROOT c = f32[%d]{0} constant({", n;
             for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), i % 10; printf "})\n}\n" }' > "$T/big.hlo"
s0=$(date +%s)
timeout 60 "$BIN" fmt --no-verify "$T/big.hlo" > "$T/big.out" 2> "$T/se"
rc=$?
s1=$(date +%s)
[ $rc = 0 ] || fail "a constant of 1,000,000 elements: exit $rc after $((s1 - s0)) s (timeout 60 s): $(head -c 200 "$T/se")"
[ "$(wc -c < "$T/big.out")" -gt 3000000 ] || fail "a constant of 1,000,000 elements: printed $(wc -c < "$T/big.out") bytes"
echo "large constant: 1,000,000 elements parsed and printed in about $((s1 - s0)) s"

# Results as a set. A good run, then a failed one to the same folder: the failed run
# leaves no results (the earlier ones would look like its own).
O="$T/res"
"$BIN" run $D/two_params.hlo -q -o "$O" || fail "results: the first run failed"
[ -f "$O/0.npy" ] || fail "results: no $O/0.npy"
mkdir "$T/m"
[ "$(stat -c %a "$O")" = "$(stat -c %a "$T/m")" ] || fail "results: folder mode $(stat -c %a "$O"), mkdir gives $(stat -c %a "$T/m")"
"$BIN" run $D/two_params.hlo -q -i $D/ok.npy -i $D/truncated.npy -o "$O" 2> /dev/null
[ $? = 2 ] || fail "results: the failing run did not exit 2"
[ ! -e "$O" ] || fail "results: a failed run left $(ls -A "$O" | tr '\n' ' ') in $O"
# A run over an earlier set replaces it whole: one result where there were two.
cat > "$T/two.hlo" <<'EOF'
HloModule two
ENTRY e {
  p = f32[4]{0} parameter(0)
  n = f32[4]{0} negate(p)
  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(p, n)
}
EOF
"$BIN" run "$T/two.hlo" -q -o "$O" && [ -f "$O/1.npy" ] || fail "results: the two-result run"
"$BIN" run $D/ok.hlo -q -o "$O" && [ -f "$O/0.npy" ] && [ ! -e "$O/1.npy" ] || fail "results: 1.npy of the earlier set survived"
# kill -9 while the set is being written: the folder holds the complete earlier set or
# the complete new one, never a mix and never a temporary file; the next run sweeps the
# temporary folder the killed one left beside it.
cat > "$T/large.hlo" <<'EOF'
HloModule large
ENTRY e {
  c = f32[] constant(2)
  a = f32[8000000]{0} broadcast(c), dimensions={}
  b = f32[8000000]{0} negate(a)
  ROOT t = (f32[8000000]{0}, f32[8000000]{0}) tuple(a, b)
}
EOF
"$BIN" run "$T/two.hlo" -q -o "$O" || fail "results: the set before the kills"
for delay in 0.2 0.4 0.6 0.8 1.0 1.3 1.6 2.0; do
  "$BIN" run "$T/large.hlo" --backend ref -q -o "$O" &
  pid=$!
  sleep $delay
  kill -9 $pid 2> /dev/null
  wait $pid 2> /dev/null
  names=$(ls -A "$O" 2> /dev/null | tr '\n' ' ')
  case "$names" in
    "0.npy 1.npy ")
      s0=$(wc -c < "$O/0.npy")
      s1=$(wc -c < "$O/1.npy")
      [ "$s0" = "$s1" ] && { [ "$s0" = 144 ] || [ "$s0" = 32000128 ]; } ||
        fail "results: kill -9 after $delay s left 0.npy of $s0 bytes and 1.npy of $s1" ;;
    *) fail "results: kill -9 after $delay s left '$names' in the folder" ;;
  esac
done
"$BIN" run $D/ok.hlo -q -o "$O" || fail "results: the run after the kills"
left=$(ls -A "$T" | grep '^\.res\.tpusim-' | tr '\n' ' ')
[ -z "$left" ] || fail "results: temporary folders left beside the results: $left"
echo "results: written as a set (a failed run, 8 kill -9 points, stale folders swept)"

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all bad-input checks passed"
