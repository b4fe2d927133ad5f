"""svg.py: the plan's cost-against-time plot: matplotlib when present, else a small SVG
written by hand (same content: every fitting candidate, the Pareto front joined;
TPUSIM_PLAN_SVG=hand forces it)."""
import math
import os

COLORS = {"v4": "#1f77b4", "v5e": "#2ca02c", "v5p": "#d62728", "v6e": "#9467bd", "v7": "#8c564b"}


def plot(path, rows, front, title, pricing):
    rows = [r for r in rows if r.get("cost") is not None and math.isfinite(r["wall_s"])]
    if os.environ.get("TPUSIM_PLAN_SVG") == "hand":  # the fallback, on request (tests)
        return hand(path, rows, front, title, pricing)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return hand(path, rows, front, title, pricing)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for chip in sorted({r["chip"] for r in rows}):
        pts = [r for r in rows if r["chip"] == chip]
        ax.scatter([r["wall_s"] / 86400 for r in pts], [r["cost"] for r in pts], s=14,
                   color=COLORS.get(chip), label=chip, alpha=0.7)
    if front:
        ax.plot([r["wall_s"] / 86400 for r in front], [r["cost"] for r in front], "k-", lw=1, label="Pareto front")
        for r in front:
            ax.annotate(f"{r['slice']} {r['data']}x{r['fsdp']}x{r['tensor']}", (r["wall_s"] / 86400, r["cost"]),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel(f"cost (USD, {pricing})")
    ax.set_title(f"tpusim plan: {title}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="svg")
    plt.close(fig)


def hand(path, rows, front, title, pricing):
    W, H, M = 640, 420, 60
    if not rows:
        xs, ys = [1.0], [1.0]
    else:
        xs = [math.log10(r["wall_s"] / 86400) for r in rows]
        ys = [math.log10(r["cost"]) for r in rows]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = min(ys) - 0.1, max(ys) + 0.1

    def px(r):
        x = M + (math.log10(r["wall_s"] / 86400) - x0) / (x1 - x0) * (W - 2 * M)
        y = H - M - (math.log10(r["cost"]) - y0) / (y1 - y0) * (H - 2 * M)
        return x, y

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="13">tpusim plan: {esc(title)}</text>',
         f'<line x1="{M}" y1="{H - M}" x2="{W - M}" y2="{H - M}" stroke="black"/>',
         f'<line x1="{M}" y1="{M}" x2="{M}" y2="{H - M}" stroke="black"/>',
         f'<text x="{W / 2}" y="{H - 20}" text-anchor="middle">time to train (days, log; {10 ** x0:.3g} to {10 ** x1:.3g})</text>',
         f'<text x="15" y="{H / 2}" transform="rotate(-90 15 {H / 2})" text-anchor="middle">cost (USD {pricing}, log; '
         f'{10 ** y0:.3g} to {10 ** y1:.3g})</text>']
    for r in rows:
        x, y = px(r)
        o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS.get(r["chip"], "gray")}" fill-opacity="0.7">'
                 f'<title>{esc(r["slice"])} {r["data"]}x{r["fsdp"]}x{r["tensor"]}</title></circle>')
    if front:
        pts = " ".join("%.1f,%.1f" % px(r) for r in front)
        o.append(f'<polyline points="{pts}" fill="none" stroke="black"/>')
    for k, chip in enumerate(sorted({r["chip"] for r in rows})):
        o.append(f'<circle cx="{W - M + 8}" cy="{M + 14 * k}" r="4" fill="{COLORS.get(chip, "gray")}"/>'
                 f'<text x="{W - M + 16}" y="{M + 4 + 14 * k}">{esc(chip)}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
