#!/bin/sh
# Runs the Python package's tests (python/tests) against the built libtpusim.so, without
# installing the package. Usage: pytest.sh LIBTPUSIM.so TPUSIM_CLI [sanitize]
# Exits 77 (ctest: skipped) when python3, pytest or numpy is missing; the JAX tests skip
# themselves without jax. With "sanitize" (an ASan + UBSan build) the sanitizer runtimes
# are preloaded into python3, and leak checking is off (the interpreter's own allocations
# are not freed at exit; tests/unit/api/test_api.c checks the library for leaks).
LIB="$1"
CLI="$2"
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "SKIP: no $PY for the Python tests"
  exit 77
fi
if ! "$PY" -c "import pytest, numpy" >/dev/null 2>&1; then
  echo "SKIP: the Python tests need pytest and numpy ($PY -m pip install pytest numpy; scripts/deps does it)"
  exit 77
fi
TPUSIM_LIBRARY="$LIB"
TPUSIM_CLI="$CLI"
TPUSIM_CHIPS="$PWD/chips"
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export TPUSIM_LIBRARY TPUSIM_CLI TPUSIM_CHIPS PYTHONPATH PYTHONDONTWRITEBYTECODE
if [ "${3:-}" = sanitize ]; then
  CC="${CC:-cc}"
  LD_PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export LD_PRELOAD ASAN_OPTIONS
fi
exec "$PY" -m pytest -q -p no:cacheprovider -rs python/tests
