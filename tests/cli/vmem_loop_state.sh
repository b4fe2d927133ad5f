#!/bin/sh
# A while loop's state in VMEM on a one-core chip (vmem_assign.c loop_state_cands,
# state_readers_ok; docs/timing-memory.md, docs/plan-memory.md): the windowed einsums inside a
# scan's backward body keep their state in VMEM, also the accumulator the inner loop hands to
# the enclosing scan as its carry, and the collective-permuted shard the body sends on before
# the matmul reads the one it replaces (the new value in a slot of its own). The XLA TPU
# compiler's buffer assignment of the probe (bench/plan_memory/probes/scan_state.py, libtpu
# compile-only, v5e 2x4: scan2_relu_t16384) holds every loop phi of 1 MiB or more in S(1),
# memory_analysis() temp 0; tpusim had 17.0 MiB of temp (the 8 MiB zero accumulator, the
# shard's input and new value, 1 + 1 MiB, and the 8 MiB of the scan's own carry that stays).
. tests/cli/lib/preamble.sh
P=bench/plan_memory/probes/scan_state/scan2_relu_t16384/tpu_part.hlo
"$BIN" compile "$P" --chip v5e > "$T/asm" 2> "$T/err" || fail "compile exited $?: $(cat "$T/err")"
temp=$(sed -n 's/^\.program .* hbm_temp=\([0-9]*\).*/\1/p' "$T/asm")
[ -n "$temp" ] || fail "no hbm_temp in the .program line"
# the scan's own carry (8 MiB, bf16[4096,2048]) stays in HBM: at most that and the scalars,
# with memory_analysis()'s fragmentation of their heap (loop counters held by phis: 1 KiB)
[ -n "$temp" ] && [ "$temp" -le 8393728 ] || fail "hbm_temp $temp > 8 MiB + 2.5 KiB (the windowed loops' state is not all in VMEM)"
for name in broadcast_in_dim.31 dynamic-update-slice.5 dynamic-slice.22 collective-permute.7; do
  grep -q "^\.hbm name=\"$name\"" "$T/asm" && fail "$name has an HBM buffer (want VMEM: loop state)"
done
[ "$fails" = 0 ] || exit 1
