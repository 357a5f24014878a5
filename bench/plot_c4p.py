#!/usr/bin/env python3
"""Draws docs/c4p-busbw.svg from the --json output of c4-c4p-bench.

Plain SVG written by hand (no plotting library needed): busbw as a share of the ideal against the
number of GPUs (log scale), ECMP mean and worst seed against the plan, one panel per scenario;
steady state of a pipelined ring, and the plan also in the one-step model.

  build/bench/c4-c4p-bench --json /tmp/c4p.json > /tmp/c4p.md
  bench/plot_c4p.py /tmp/c4p.json docs/c4p-busbw.svg
"""
import json
import math
import sys

PANEL_W, PANEL_H = 330, 240
MARGIN_L, MARGIN_T, MARGIN_B = 52, 44, 46
COLS = 3
SERIES = [  # key, label, colour, dash, width; drawn in this order (later on top)
    ("plan", "plan", "#1f77b4", "", 4),
    ("step_plan", "plan, one-step model (no pipelining)", "#9467bd", "2,2", 2),
    ("plan_live", "plan, failure learnt live (weights only)", "#2ca02c", "7,4", 2),
    ("ecmp_mean", "ECMP, mean of seeds", "#d62728", "", 2),
    ("ecmp_worst", "ECMP, worst seed", "#ff7f0e", "2,3", 2),
]
TOP = 1.05  # the y axis runs to 105% so lines at 100% stay visible


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_c4p.py RESULTS.json OUT.svg")
    rows = json.load(open(sys.argv[1]))
    scenarios = []
    for r in rows:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
    sizes = sorted({r["gpus"] for r in rows})
    rows_n = math.ceil(len(scenarios) / COLS)
    width = COLS * (PANEL_W + MARGIN_L) + 20
    height = rows_n * (PANEL_H + MARGIN_T + MARGIN_B) + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           '<text x="10" y="18" font-size="14" font-weight="bold">Ring allreduce busbw on a '
           'simulated leaf–spine fabric, % of what the links allow (C4P plan vs ECMP)</text>']
    lx0, lx1 = math.log2(sizes[0]), math.log2(sizes[-1])
    for i, sc in enumerate(scenarios):
        ox = 10 + (i % COLS) * (PANEL_W + MARGIN_L) + MARGIN_L
        oy = 30 + (i // COLS) * (PANEL_H + MARGIN_T + MARGIN_B) + MARGIN_T

        def px(g):
            return ox + (math.log2(g) - lx0) / max(lx1 - lx0, 1e-9) * PANEL_W

        def py(v):
            return oy + PANEL_H - v / TOP * PANEL_H  # v in [0, TOP]

        out.append(f'<text x="{ox}" y="{oy - 10}" font-weight="bold">{esc(sc)}</text>')
        out.append(f'<rect x="{ox}" y="{oy}" width="{PANEL_W}" height="{PANEL_H}" '
                   'fill="none" stroke="#888"/>')
        for t in (0, 0.25, 0.5, 0.75, 0.95, 1.0):
            y = py(t)
            colour = "#bbb" if t != 0.95 else "#999"
            dash = ' stroke-dasharray="3,3"' if t == 0.95 else ""
            out.append(f'<line x1="{ox}" y1="{y:.1f}" x2="{ox + PANEL_W}" y2="{y:.1f}" '
                       f'stroke="{colour}"{dash}/>')
            out.append(f'<text x="{ox - 6}" y="{y + 4:.1f}" text-anchor="end">{int(t * 100)}%</text>')
        for g in sizes:
            x = px(g)
            out.append(f'<text x="{x:.1f}" y="{oy + PANEL_H + 14}" text-anchor="middle">{g}</text>')
        out.append(f'<text x="{ox + PANEL_W / 2}" y="{oy + PANEL_H + 30}" '
                   'text-anchor="middle">GPUs (8 per node)</text>')
        data = sorted((r for r in rows if r["scenario"] == sc), key=lambda r: r["gpus"])
        for key, _, colour, dash, width in SERIES:
            pts = [(px(r["gpus"]), py(min(1.0, r[key]))) for r in data if r[key] >= 0]
            if not pts:
                continue
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" '
                       f'stroke-width="{width}"{dash_attr}/>')
            for x, y in pts:
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
    ly = height - 24
    lx = 20
    for _, label, colour, dash, width in SERIES:
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 28}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="{width}"{dash_attr}/>')
        out.append(f'<text x="{lx + 34}" y="{ly + 4}">{esc(label)}</text>')
        lx += 40 + 6 * len(label)
    out.append(f'<text x="{lx}" y="{ly + 4}" fill="#666">dashed grey line: 95%</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
