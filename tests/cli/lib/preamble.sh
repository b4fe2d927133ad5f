# Sourced by the script tests (tests/cli/*.sh, run from the project root with the CLI as
# $1): BIN, a scratch directory T removed on exit, and fail(), which counts a failure and
# goes on (a script ends with `[ "$fails" = 0 ] || exit 1`).
set -u
BIN="$1"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
