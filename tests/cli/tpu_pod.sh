#!/bin/sh
# Partitioned programs from the real TPU compiler (tests/tpu/cases/pod_*: libtpu compile-only
# on a v5e 2x4 slice, committed): each runs on 8 simulated chips as compiled — its
# collectives, layouts and fusions kept — and gives the values of its source program (JAX's
# lowered sharded HLO, partitioned by tpusim itself), within 1e-5 of the largest output (the
# compiler reorders f32 sums); each is also timed, beside the compiler's own estimate.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null && python3 -c "import numpy" 2> /dev/null || { echo "skip: no python3 with numpy"; exit 77; }
n=0
for d in tests/tpu/cases/pod_*; do
  [ -d "$d" ] || continue
  name=$(basename "$d")
  n=$((n + 1))
  ins=""
  for f in $(ls "$d"/in*.npy | sort -V); do ins="$ins -i $f"; done
  shs=$(python3 -c "import json,sys; print(' '.join('--out-sharding \"%s\"' % s for s in json.load(open(sys.argv[1]))['out_shardings']))" "$d/meta.json")
  eval "\"$BIN\" run \"$d/tpu.hlo\" $ins $shs --backend tpu --chip v5e -o \"$T/$name.tpu\"" > "$T/$name.log" 2> "$T/err" ||
    { fail "$name tpu.hlo exited $?: $(cat "$T/err")"; continue; }
  grep -q "^pod: 8 devices" "$T/$name.log" || fail "$name tpu.hlo did not run on 8 chips"
  "$BIN" run "$d/prog.hlo" $ins --backend tpu --chip v5e -o "$T/$name.src" > "$T/$name.src.log" 2> "$T/err" ||
    { fail "$name prog.hlo exited $?: $(cat "$T/err")"; continue; }
  python3 - "$T/$name.tpu" "$T/$name.src" "$name" <<'EOF' || fail "$name: values differ"
import glob, os, sys
import numpy as np
a, b, name = sys.argv[1:]
files = sorted(os.listdir(b))
assert files and files == sorted(os.listdir(a)), (files, os.listdir(a))
for f in files:
    x, y = np.load(os.path.join(a, f)), np.load(os.path.join(b, f))
    assert x.shape == y.shape, (f, x.shape, y.shape)
    big = max(1.0, float(np.abs(y).max()))
    err = float(np.abs(x.astype(np.float64) - y).max())
    assert err <= 1e-5 * big, (f, err, big)
EOF
  est=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['estimated_cycles'])" "$d/meta.json")
  got=$(grep -o "^step time: .*" "$T/$name.log")
  echo "  $name: tpusim $got; the compiler's estimate $est cycles"
done
[ $n -ge 4 ] || fail "only $n pod cases"
[ $fails -eq 0 ] && echo "TPU-compiled pod programs: $n of $n match their source on 8 chips"
exit $fails
