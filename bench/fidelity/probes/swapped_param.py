#!/usr/bin/env python3
"""swapped_param.py [CHIPS] (session 30, conv3d; needs libtpu, compile-only): the entry layout the
XLA TPU compiler gives an activation that a 1x1 convolution and its weight gradient both read (the
weight gradient with batch and features swapped), where neither reading's features fill the
lanes: NCHW bf16 [B,C,H,H] x OIHW [Co,C,1,1], the forward convolution, its input gradient and its
weight gradient of dy = 2 y (conv_grad_nchw_oihw_nchw_b8_28_c64to128_k1's form, other shapes, off
the corpus). One JSON line per case and generation: the compiler's entry layouts and top-level
ops, and tpusim's own parameter layout and kernels; committed in data/swapped_param.jsonl."""
import json, os, re, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

CASES = [(8, 32, 64, 20), (8, 96, 64, 16), (16, 48, 32, 12), (4, 64, 128, 24), (8, 200, 64, 14)]


def hlo(B, C, Co, H):
    x, y, w = f"bf16[{B},{C},{H},{H}]", f"bf16[{B},{Co},{H},{H}]", f"bf16[{Co},{C},1,1]"
    yf, dw = f"f32[{B},{Co},{H},{H}]", f"bf16[{Co},{C},1,1]"
    return f"""HloModule swapped_param, entry_computation_layout={{({x}{{3,2,1,0}}, {w}{{3,2,1,0}})->({x}{{3,2,1,0}}, {dw}{{3,2,1,0}})}}

ENTRY main.1 {{
  x.1 = {x}{{3,2,1,0}} parameter(0)
  w.1 = {w}{{3,2,1,0}} parameter(1)
  c.3 = {y}{{3,2,1,0}} convolution(x.1, w.1), window={{size=1x1}}, dim_labels=bf01_oi01->bf01
  cf = {yf}{{3,2,1,0}} convert(c.3)
  two = f32[] constant(2)
  twob = {yf}{{3,2,1,0}} broadcast(two), dimensions={{}}
  m = {yf}{{3,2,1,0}} multiply(cf, twob)
  dy = {y}{{3,2,1,0}} convert(m)
  dx = {x}{{3,2,1,0}} convolution(dy, w.1), window={{size=1x1}}, dim_labels=bf01_io01->bf01
  dw.4 = {dw}{{3,2,1,0}} convolution(x.1, dy), window={{size={H}x{H}}}, dim_labels=fb01_io01->fb01
  ROOT t = ({x}{{3,2,1,0}}, {dw}{{3,2,1,0}}) tuple(dx, dw.4)
}}
"""


def tpusim_param_layout(text, chip):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "p.hlo")
        open(p, "w").write(text)
        out = subprocess.run([libtpu.TPUSIM, "compile", p, "--chip", libtpu.PRESET.get(chip, chip), "--emit", "hlo"],
                             capture_output=True, text=True).stdout
    m = re.search(r"x\.1 = \S+?\{([\d,]+)\} parameter\(0\)", out[out.rfind("\nENTRY"):])
    return m.group(1) if m else None


if __name__ == "__main__":
    for case, chip, text, own, summ, out in libtpu.each_compiled(CASES, hlo, libtpu.chips_arg(sys.argv)):
        lay = tpusim_param_layout(text, chip)
        m = re.search(r"entry_computation_layout=\{\(\S+?\{([\d,]+)", out[:out.find("\n")])
        print(json.dumps(dict(case=case, chip=chip, entry=summ["entry_estimated_cycles"],
                              x_layout=m.group(1) if m else None, tpusim_x_layout=lay,
                              ops=libtpu.entry_ops(out), tpusim=own)), flush=True)
