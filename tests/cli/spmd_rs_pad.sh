#!/bin/sh
# combine-collectives pads a reduce-scatter along the rows of a 2-D operand where the XLA TPU
# compiler's all-reduce-scatter fusion does (docs/spmd.md; rs_pad.c): groups of 2 and 4, an
# operand of more than one of the chip's spans (reduce_scatter_span_bytes), group x spans >= 8;
# then a collective-permute moves the rows past each block to the next device of the group.
# bf16 [2048,2048] over groups of 4 on v5e (8 MiB, 2 spans): padded; [2048,1024] (one span),
# the same on v6e (8 MiB spans), over groups of 8, over 2 (2 x 2 spans) and along the columns:
# not. Values: the rewritten program's (run by the reference interpreter) as the original's, on
# a chip whose span is 1 kB.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
# prog NAME DTYPE ROWS COLS GROUPS GROUPSIZE DIM
prog() {
  n=8
  if [ "$7" = 0 ]; then out="$(($3 / $6)),$4"; else out="$3,$(($4 / $6))"; fi
  cat > "$T/$1.hlo" <<EOF
HloModule g, num_partitions=$n

add {
  a = $2[] parameter(0)
  b = $2[] parameter(1)
  ROOT s = $2[] add(a, b)
}

ENTRY e {
  x = $2[$3,$4] parameter(0)
  pid = u32[] partition-id()
  pf = $2[] convert(pid)
  pb = $2[$3,$4] broadcast(pf), dimensions={}
  xs = $2[$3,$4] multiply(x, pb)
  rs = $2[$out] reduce-scatter(xs), channel_id=1, replica_groups=$5, dimensions={$7}, use_global_device_ids=true, to_apply=add
  ROOT n = $2[$out] negate(rs)
}
EOF
}
# check NAME CHIP WANT(1: padded and permuted, 0: not)
check() {
  "$BIN" compile "$T/$1.hlo" --chip "$2" --dump-after combine-collectives > "$T/dump" 2> "$T/err" ||
    { fail "$1 on $2: compile exited $?: $(cat "$T/err")"; return; }
  got=0
  grep -Eq " collective-permute\(" "$T/dump" && grep -Eq " pad\(" "$T/dump" && got=1
  [ "$got" = "$3" ] || fail "$1 on $2: padded+permuted $got, want $3: $(grep -E 'reduce-scatter|permute|pad\(' "$T/dump")"
}
G4='{{0,2,4,6},{1,3,5,7}}'
G2='{{0,4},{1,5},{2,6},{3,7}}'
G8='{{0,1,2,3,4,5,6,7}}'
prog big bf16 2048 2048 "$G4" 4 0
prog small bf16 2048 1024 "$G4" 4 0
prog g8 bf16 4096 2048 "$G8" 8 0
prog g2 bf16 2048 2048 "$G2" 2 0
prog g2big bf16 2048 4096 "$G2" 2 0
prog cols bf16 2048 2048 "$G4" 4 1
check big v5e 1
check big v5p 1
check small v5e 0
check big v6e 0
check g8 v5e 0
check g2 v5e 0
check g2big v5e 1
check cols v5e 0
# the padded row counts and the permute's rows: 2048 rows over 4, 16 rows of padding each
"$BIN" compile "$T/big.hlo" --chip v5e --dump-after combine-collectives > "$T/dump" 2> "$T/err" || fail "big: $(cat "$T/err")"
grep -Eq 'bf16\[2112,2048\][^ ]* pad\(' "$T/dump" || fail "big: not padded to 2112 rows: $(grep -E ' pad\(' "$T/dump")"
grep -Eq 'bf16\[48,2048\][^ ]* collective-permute\(' "$T/dump" || fail "big: no permute of 48 rows: $(grep -E 'permute' "$T/dump")"
# a scatter that is the program's result (bench/spmd/cases gemm_contract_split: the compiler
# pads it and permutes too)
sed -e 's/  rs = bf16\[512,2048\] reduce-scatter/  ROOT rs = bf16[512,2048] reduce-scatter/' -e '/ROOT n = /d' "$T/big.hlo" > "$T/root.hlo"
check root v5e 1
# values: a chip whose span is 1 kB pads f32 [64,16] (4 kB) over groups of 4 and of 2
sed 's/"reduce_scatter_span_bytes": {"value": 4194304,/"reduce_scatter_span_bytes": {"value": 1024,/' chips/v5e.json > "$T/tiny.json"
python3 -c "
import numpy as np
np.save('$T/x.npy', np.random.RandomState(0).standard_normal((64, 16)).astype(np.float32))" || fail "inputs"
for g in 4 2; do
  if [ $g = 4 ]; then groups="$G4"; else groups="$G2"; fi
  prog v$g f32 64 16 "$groups" $g 0
  check v$g "$T/tiny.json" 1
  # the rewritten program (the dump after the pass) run by the reference interpreter
  "$BIN" compile "$T/v$g.hlo" --chip "$T/tiny.json" --dump-after combine-collectives > "$T/d$g.hlo" 2> "$T/err" ||
    fail "group $g: compile exited $?: $(cat "$T/err")"
  for h in d$g v$g; do
    "$BIN" run "$T/$h.hlo" --backend ref -i "$T/x.npy" --per-device -o "$T/$h" > /dev/null 2> "$T/err" ||
      fail "group $g: $h run exited $?: $(cat "$T/err")"
  done
  python3 - "$T" $g <<'EOF' || fail "group $g: the padded program's values differ from the original's"
import sys, numpy as np
t, g = sys.argv[1], int(sys.argv[2])
for d in range(8):
    a, b = np.load(f"{t}/d{g}/dev{d}/0.npy"), np.load(f"{t}/v{g}/dev{d}/0.npy")
    assert a.shape == (64 // g, 16) and np.allclose(a, b, rtol=1e-6, atol=1e-5), (d, np.abs(a - b).max())
EOF
done
[ "$fails" = 0 ] || exit 1
