#!/usr/bin/env python3
"""Generates tests/scalesim/: SCALE-Sim configs and topologies, and SCALE-Sim's own
COMPUTE_REPORT.csv for each run, so the test suite can compare tpusim against it without
Python.

Needs SCALE-Sim from PyPI: `pip install scalesim 'numpy<2'` (scalesim 3.0.0 calls int() on
1-element arrays, which NumPy 2 rejects). Run from the repository root:

    python3 scripts/gen_scalesim_fixtures.py [--only RUN_ID ...]

Writes tests/scalesim/{configs,topologies,expected}/, tests/scalesim/runs.txt (one run per
line: id config topology kind) and the version lines of tests/scalesim/README.md.
"""
import argparse
import importlib.metadata as md
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "scalesim")

# name -> (rows, cols, ifmap/filter/ofmap SRAM kB, InterfaceBandwidth, Bandwidth)
CONFIGS = {
    "ws_4x4": (4, 4, (8, 8, 8), "CALC", 10),
    "ws_8x8": (8, 8, (64, 64, 64), "CALC", 10),
    "ws_32x32": (32, 32, (64, 64, 64), "CALC", 10),
    "ws_16x64": (16, 64, (256, 256, 128), "CALC", 10),
    "ws_64x16": (64, 16, (256, 256, 128), "CALC", 10),
    "ws_128x128": (128, 128, (1024, 1024, 512), "CALC", 10),
    "ws_8x32_user": (8, 32, (64, 64, 64), "USER", 60),
    "ws_1x8": (1, 8, (64, 64, 64), "CALC", 10),
    "ws_8x1": (8, 1, (64, 64, 64), "CALC", 10),
    "ws_3x5": (3, 5, (64, 64, 64), "CALC", 10),
}

CONV_HEADER = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
               "Channels, Num Filter, Strides,")
GEMM_HEADER = "Layer Name, M, N, K,"

# name -> (kind, rows). Conv rows: name, ifmap h, ifmap w, filter h, filter w, channels,
# filters, stride. GEMM rows: name, M, N, K.
TOPOLOGIES = {
    # SCALE-Sim's CI example (topologies/conv_nets/alexnet_part.csv)
    "alexnet_part": ("conv", [("Conv1", 224, 224, 11, 11, 3, 96, 4)]),
    # AlexNet's other conv layers as SCALE-Sim's alexnet.csv lists them
    "alexnet_rest": ("conv", [
        ("Conv2", 27, 27, 5, 5, 96, 256, 1),
        ("Conv3", 13, 13, 3, 3, 256, 384, 1),
        ("Conv4", 13, 13, 3, 3, 384, 384, 1),
        ("Conv5", 13, 13, 3, 3, 384, 256, 1),
    ]),
    # edge cases: K < R (1x1 conv, 3 channels), N < C, M = 1 (filter covers the ifmap),
    # strides that do not divide, non-square ifmaps and filters, a depthwise ("DP") layer
    # that SCALE-Sim expands into one layer per channel, stride larger than the filter
    "conv_edge": ("conv", [
        ("Conv1x1", 8, 8, 1, 1, 3, 4, 1),
        ("OnePixel", 5, 5, 5, 5, 2, 16, 1),
        ("Stride3", 13, 11, 3, 3, 4, 10, 3),
        ("RectFilter", 12, 10, 3, 1, 6, 20, 2),
        ("DP_conv", 10, 10, 3, 3, 3, 1, 1),
        ("BigStride", 9, 9, 2, 2, 1, 1, 4),
        ("Wide", 6, 30, 3, 5, 8, 70, 1),
    ]),
    "gemm_edge": ("gemm", [
        ("gemv", 1, 64, 100),
        ("tall_skinny", 200, 3, 5),
        ("square", 64, 64, 64),
        ("odd", 37, 45, 29),
        ("deep_k", 16, 10, 300),
        ("one", 1, 1, 1),
    ]),
    # SCALE-Sim's topologies/GEMM_mnk/test_mnk_input.csv
    "gemm_mnk": ("gemm", [("Test 1", 256, 128, 256)]),
}

RUNS = [
    ("alexnet_part_32x32", "ws_32x32", "alexnet_part"),
    ("alexnet_part_128x128", "ws_128x128", "alexnet_part"),
    ("alexnet_rest_128x128", "ws_128x128", "alexnet_rest"),
    ("conv_edge_4x4", "ws_4x4", "conv_edge"),
    ("conv_edge_8x8", "ws_8x8", "conv_edge"),
    ("conv_edge_32x32", "ws_32x32", "conv_edge"),
    ("conv_edge_16x64", "ws_16x64", "conv_edge"),
    ("conv_edge_64x16", "ws_64x16", "conv_edge"),
    ("gemm_edge_4x4", "ws_4x4", "gemm_edge"),
    ("gemm_edge_8x8", "ws_8x8", "gemm_edge"),
    ("gemm_edge_16x64", "ws_16x64", "gemm_edge"),
    ("gemm_edge_64x16", "ws_64x16", "gemm_edge"),
    ("gemm_edge_128x128", "ws_128x128", "gemm_edge"),
    ("gemm_edge_8x32_user", "ws_8x32_user", "gemm_edge"),
    ("gemm_edge_1x8", "ws_1x8", "gemm_edge"),
    ("gemm_edge_8x1", "ws_8x1", "gemm_edge"),
    ("gemm_edge_3x5", "ws_3x5", "gemm_edge"),
    ("gemm_mnk_32x32", "ws_32x32", "gemm_mnk"),
    ("gemm_mnk_16x64", "ws_16x64", "gemm_mnk"),
]


def config_text(name):
    rows, cols, (isz, fsz, osz), bwmode, bw = CONFIGS[name]
    # SCALE-Sim v3 reads [layout], [sparsity], ReadRequestBuffer and UseRamulatorTrace
    # unconditionally; v2 configs lack them (tpusim accepts both).
    return f"""[general]
run_name = {name}

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    {isz}
FilterSramSzkB:   {fsz}
OfmapSramSzkB:    {osz}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : {bw}
Dataflow : ws
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
FilterCustomLayout: False
IfmapSRAMBankBandwidth: {bw}
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterSRAMBankBandwidth: {bw}
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: {bwmode}
UseRamulatorTrace: False
"""


def topology_text(name):
    kind, rows = TOPOLOGIES[name]
    lines = [CONV_HEADER if kind == "conv" else GEMM_HEADER]
    for r in rows:
        lines.append(", ".join(str(x) for x in r) + ",")
    return "\n".join(lines) + "\n"


def run_scalesim(cfg, topo, kind, workdir):
    """Runs SCALE-Sim in this process; returns (report text, seconds)."""
    from scalesim.scale_sim import scalesim
    layout = os.path.join(workdir, "layout.csv")  # v3 opens one even when unused
    with open(layout, "w") as f:
        f.write("Layer name,\n")
    outdir = os.path.join(workdir, "out")
    t0 = time.perf_counter()
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo,
                 layout=layout, input_type_gemm=(kind == "gemm"))
    s.run_scale(top_path=outdir)
    dt = time.perf_counter() - t0
    run_name = s.config.get_run_name()
    with open(os.path.join(outdir, run_name, "COMPUTE_REPORT.csv")) as f:
        return f.read(), dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="run ids to regenerate")
    args = ap.parse_args()
    for sub in ("configs", "topologies", "expected"):
        os.makedirs(os.path.join(OUT, sub), exist_ok=True)
    for name in CONFIGS:
        with open(os.path.join(OUT, "configs", name + ".cfg"), "w") as f:
            f.write(config_text(name))
    for name in TOPOLOGIES:
        with open(os.path.join(OUT, "topologies", name + ".csv"), "w") as f:
            f.write(topology_text(name))
    with open(os.path.join(OUT, "runs.txt"), "w") as f:
        f.write("# run_id config topology kind (generated by scripts/gen_scalesim_fixtures.py)\n")
        for rid, cfg, topo in RUNS:
            f.write(f"{rid} configs/{cfg}.cfg topologies/{topo}.csv {TOPOLOGIES[topo][0]}\n")
    for rid, cfg, topo in RUNS:
        if args.only and rid not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            report, dt = run_scalesim(os.path.join(OUT, "configs", cfg + ".cfg"),
                                      os.path.join(OUT, "topologies", topo + ".csv"),
                                      TOPOLOGIES[topo][0], tmp)
        with open(os.path.join(OUT, "expected", rid + ".csv"), "w") as f:
            f.write(report)
        print(f"{rid}: {dt:.1f} s", flush=True)
    with open(os.path.join(OUT, "versions.txt"), "w") as f:
        f.write(f"scalesim {md.version('scalesim')}\n")
        f.write(f"numpy {md.version('numpy')}\n")
        f.write(f"python {platform.python_version()}\n")


if __name__ == "__main__":
    sys.exit(main())
