#!/bin/sh
# tpusim chips: the preset table, one chip with sources, JSON output and rejected inputs.
set -u
BIN=$1
case "$BIN" in /*) ;; *) BIN=$PWD/$BIN ;; esac
unset TPUSIM_CHIPS
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The table: one row per preset, peaks as listed by the sources.
"$BIN" chips >"$T/out" 2>"$T/err" || fail "chips exited $?: $(cat "$T/err")"
for n in v1 v2 v3 v4 v5e v5p v6e v7; do
  grep -q "^$n " "$T/out" || fail "no row for $n"
done
[ "$(grep -c '^v[0-9]' "$T/out")" -eq 8 ] || fail "expected 8 preset rows"
grep '^v5p ' "$T/out" | grep -q ' 459.0 ' || fail "v5p bf16 peak"
grep '^v5p ' "$T/out" | grep -q ' 918.0 ' || fail "v5p int8 peak"
grep '^v1 ' "$T/out" | grep -q ' 92.0 ' || fail "v1 int8 peak"
grep '^v4 ' "$T/out" | grep -q '6 x 45? GB/s 3d-torus' || fail "v4 ICI"

# One chip in full, with sources; found from another directory via the executable's path.
(cd / && "$BIN" chips v4) >"$T/v4" 2>"$T/err" || fail "chips v4 from / exited: $(cat "$T/err")"
grep -q '^  clock_hz  *1.05e+09 *Hz *published *ISCA23' "$T/v4" || fail "v4 clock line"
grep -q '^  ISCA23 ' "$T/v4" || fail "v4 sources"
grep -q 'listed 2.75e+14, 0.1% apart' "$T/v4" || fail "v4 derived peak"

# JSON.
"$BIN" chips --json >"$T/j" || fail "chips --json"
[ "$(grep -c '"name": "v' "$T/j")" -eq 8 ] || fail "json list"
grep -q '"peak_bf16_flops": 2.307e+15' "$T/j" || fail "json v7 peak"
"$BIN" chips --json chips/v5e.json >"$T/j5" || fail "chips --json FILE"
grep -q '"source": "CL"' "$T/j5" || fail "json sources"
grep -q '"status": "derived"' "$T/j5" || fail "json status"

# A user's own chip file via TPUSIM_CHIPS, and a broken one.
sed 's/"name": "v5e"/"name": "mine"/' chips/v5e.json >"$T/mine.json"
TPUSIM_CHIPS=$T "$BIN" chips >"$T/mine" || fail "chips with TPUSIM_CHIPS"
grep -q '^mine ' "$T/mine" || fail "own chip listed"
[ "$(grep -c '^v[0-9]' "$T/mine")" -eq 0 ] || fail "presets listed despite TPUSIM_CHIPS"
sed 's/"clock_hz":        {"value": 1.5e9,/"clock_hz":        {"value": -1.5e9,/' chips/v5e.json >"$T/bad.json"
"$BIN" chips "$T/bad.json" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] || fail "bad file should exit 2"
grep -q "^$T/bad.json:10:32: error: field 'clock_hz': 'value' must be a positive number" "$T/err" || fail "bad file message: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "output written for a bad file"

# Unknown names and options.
"$BIN" chips v99 >/dev/null 2>"$T/err"
[ $? -eq 2 ] || fail "unknown chip should exit 2"
grep -q "unknown chip 'v99' (presets: v1, v2, v3, v4, v5e, v5p, v6e, v7)" "$T/err" || fail "unknown chip message"
"$BIN" chips --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown option should exit 2"
"$BIN" chips --help | grep -q 'usage: tpusim chips' || fail "help"
echo "chips.sh: ok"
