#!/usr/bin/env python3
"""Draw the GEMM sweep's roofline as a standalone SVG (no plotting library): log-log
arithmetic intensity (FLOP per HBM byte moved) against FLOP/s, one roofline per chip
(min(peak, intensity x HBM bandwidth)) and the measured points on it.

  roofline_svg.py gemm_sweep.tsv roofline.svg
"""
import csv
import math
import sys

W, H = 760, 520
L, R, T, B = 80, 190, 40, 60          # margins: plot area is [L, W-R] x [T, H-B]
X0, X1 = 1.0, 1e4                     # FLOP/B
Y0, Y1 = 1e12, 1e15                   # FLOP/s
COLORS = {"v4": "#1f77b4", "v5e": "#d62728", "v5p": "#2ca02c"}


def px(x):
    return L + (math.log10(x) - math.log10(X0)) / (math.log10(X1) - math.log10(X0)) * (W - L - R)


def py(y):
    return H - B - (math.log10(y) - math.log10(Y0)) / (math.log10(Y1) - math.log10(Y0)) * (H - T - B)


def main():
    rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{(L + W - R) / 2}" y="22" text-anchor="middle" font-size="14">'
           f'bf16 GEMM roofline (tpusim --mode timing, f32 output)</text>']
    # Grid and axes.
    for e in range(0, 5):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(12, 16):
        y = py(10 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** (e - 12):g} PF/s</text>'
                   if e >= 15 else f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** (e - 12):g} TF/s</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="black"/>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 18}" text-anchor="middle">'
               f'arithmetic intensity (FLOP per HBM byte moved)</text>')
    out.append(f'<text transform="translate(18,{(T + H - B) / 2}) rotate(-90)" text-anchor="middle">'
               f'achieved FLOP/s</text>')
    chips = list(dict.fromkeys(r["chip"] for r in rows))
    for ci, chip in enumerate(chips):
        rs = [r for r in rows if r["chip"] == chip]
        col = COLORS.get(chip, "#555")
        peak, bw = float(rs[0]["peak"]), float(rs[0]["hbm_bw"])
        ridge = peak / bw
        pts = [(X0, X0 * bw), (ridge, peak), (X1, peak)]
        path = " ".join(f"{px(x):.1f},{py(max(y, Y0)):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{col}" stroke-width="1.5"/>')
        for r in rs:
            x, y = float(r["intensity"]), float(r["flops_per_s"])
            if not (X0 <= x <= X1 and Y0 <= y <= Y1):
                continue
            square = r["m"] == r["n"] == r["k"]
            if square:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{col}"/>')
            else:
                s = 4.5
                out.append(f'<rect x="{px(x) - s:.1f}" y="{py(y) - s:.1f}" width="{2 * s}" height="{2 * s}" '
                           f'fill="none" stroke="{col}" stroke-width="1.5"/>')
        ly = T + 20 + 20 * ci
        out.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{col}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 46}" y="{ly + 4}">{chip} ({peak / 1e12:.0f} TF/s, {bw / 1e9:.0f} GB/s)</text>')
    ly = T + 20 + 20 * len(chips) + 10
    out.append(f'<circle cx="{W - R + 27}" cy="{ly}" r="4" fill="#555"/>')
    out.append(f'<text x="{W - R + 46}" y="{ly + 4}">square M=N=K</text>')
    out.append(f'<rect x="{W - R + 22.5}" y="{ly + 15.5}" width="9" height="9" fill="none" stroke="#555" stroke-width="1.5"/>')
    out.append(f'<text x="{W - R + 46}" y="{ly + 24}">skinny (small M or K)</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as fh:
        fh.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
