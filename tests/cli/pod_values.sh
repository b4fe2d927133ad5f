#!/bin/sh
# The pod corpus (tests/pod) per device: XLA's partitioned programs — its final one (opt.hlo)
# and the one right after its SPMD partitioner (xla_part.hlo) — run on tpusim's reference
# backend, every device's results against what XLA computed; and tpusim's own partitioning
# of the GSPMD form. Needs numpy (exit 77 = skipped without it).
BIN="$1"
python3 -c "import numpy" 2>/dev/null || { echo "numpy missing: skipped"; exit 77; }
python3 tests/pod/check_tpusim.py --tpusim "$BIN"
