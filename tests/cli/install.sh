#!/bin/sh
# Out of the box: `cmake --install` puts the binary and the chip presets under a prefix,
# and the installed binary finds them from any directory; -o creates missing parents.
. tests/cli/lib/preamble.sh
BUILD=$(dirname "$BIN")

cmake --install "$BUILD" --prefix "$T/inst" > "$T/log" 2>&1 || fail "cmake --install exited $?: $(tail -2 "$T/log")"
[ -x "$T/inst/bin/tpusim" ] || fail "no installed binary"
[ -f "$T/inst/share/tpusim/chips/v5e.json" ] || fail "no installed chip presets"
# From another directory, without TPUSIM_CHIPS, with the source tree out of reach of the
# binary's own path: the install tree's presets are found.
(cd / && env -u TPUSIM_CHIPS "$T/inst/bin/tpusim" chips v5p > "$T/out" 2> "$T/err") || fail "installed tpusim chips exited $?: $(cat "$T/err")"
grep -q "v5p" "$T/out" || fail "the installed binary lists no v5p"
# A copy of the install tree elsewhere still finds its presets (../share/tpusim/chips).
cp -r "$T/inst" "$T/moved"
(cd / && env -u TPUSIM_CHIPS "$T/moved/bin/tpusim" chips v5e > "$T/out" 2> "$T/err") || fail "moved install exited $?"

# -o a/b/c creates the parents; an existing file in the way is a one-line error, exit 1.
"$BIN" run examples/mlp.hlo -o "$T/a/b/c" -q || fail "-o with missing parents exited $?"
[ -s "$T/a/b/c/0.npy" ] || fail "no result under the new directories"
touch "$T/file"
"$BIN" run examples/mlp.hlo -o "$T/file/x" -q 2> "$T/err"
[ $? -eq 1 ] || fail "-o under a file did not exit 1"
grep -q "^$T/file/x:0:0: error: cannot create the output folder" "$T/err" || fail "message: $(cat "$T/err")"

[ $fails -eq 0 ] && echo "install CLI: all checks passed"
exit $fails
