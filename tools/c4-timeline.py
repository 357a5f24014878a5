#!/usr/bin/env python3
"""Draws a training timeline as an SVG picture: the training step of every rank over time, with
the moments that matter marked (fault injected, C4D verdict, cordon, restart, running again).

  c4-timeline.py --steps DIR [--mark WHEN=LABEL ...] [--title TEXT] -o OUT.svg

--steps DIR   the files rank-<r>.steps that `c4-netbench --step-log DIR` writes: one line
              "<unix seconds> <step>" per step, appended across restarts (a resume shows as the
              step going back to the checkpoint).
--mark        WHEN is unix seconds (1764770000.25) or RFC 3339 (2026-12-03T13:00:00.25Z); LABEL is
              free text. Repeatable. The span from a mark labelled "fault..." to one labelled
              "running..." is shaded as time lost.
Standard library only. Exits 2 with a message on bad input (no step files, bad lines, bad marks).
"""
import argparse
import datetime
import glob
import html
import os
import re
import sys

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
# The first key a label contains picks its colour ("C4D verdict (Event FaultDetected)" is a
# verdict, not a fault).
MARK_COLOURS = {"verdict": "#9467bd", "cordon": "#8c564b", "restart": "#ff7f0e",
                "running": "#2ca02c", "fault": "#d62728"}


class InputError(Exception):
    pass


def parse_when(text):
    try:
        return float(text)
    except ValueError:
        pass
    t = text.strip().replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise InputError(f"mark time {text!r} is neither unix seconds nor RFC 3339") from None


def read_steps(directory):
    files = sorted(glob.glob(os.path.join(directory, "rank-*.steps")),
                   key=lambda p: int(re.search(r"rank-(\d+)\.steps$", p).group(1))
                   if re.search(r"rank-(\d+)\.steps$", p) else 1 << 30)
    ranks = {}
    for path in files:
        m = re.search(r"rank-(\d+)\.steps$", path)
        if not m:
            continue
        points = []
        with open(path) as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                try:
                    t, step = float(parts[0]), int(parts[1])
                except (ValueError, IndexError):
                    raise InputError(f"{path}:{n}: expected '<unix seconds> <step>', got "
                                     f"{line.strip()!r}") from None
                points.append((t, step))
        if points:
            ranks[int(m.group(1))] = points
    if not ranks:
        raise InputError(f"no rank-<r>.steps files with data in {directory}")
    return ranks


def segments(points):
    """Splits a rank's points where the step goes back (a restart from a checkpoint)."""
    out, cur = [], []
    for t, s in points:
        if cur and s < cur[-1][1]:
            out.append(cur)
            cur = []
        cur.append((t, s))
    if cur:
        out.append(cur)
    return out


def mark_colour(label):
    low = label.lower()
    for key, colour in MARK_COLOURS.items():
        if key in low:
            return colour
    return "#333333"


def render(ranks, marks, title):
    t0 = min(p[0][0] for p in ranks.values())
    times = [t for pts in ranks.values() for t, _ in pts] + [w for w, _ in marks]
    t1 = max(times)
    s_max = max(s for pts in ranks.values() for _, s in pts)
    width, height = 1100, 520
    left, right, top, bottom = 70, 300, 50, 60
    pw, ph = width - left - right, height - top - bottom
    span = max(t1 - t0, 1e-3)

    def x(t):
        return left + (t - t0) / span * pw

    def y(s):
        return top + ph - s / max(s_max, 1) * ph

    e = []
    e.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">')
    e.append(f'<rect width="{width}" height="{height}" fill="white"/>')
    e.append(f'<text x="{left}" y="28" font-size="16" font-weight="bold">{html.escape(title)}'
             '</text>')
    # Time lost: from the fault to running again.
    fault = next((w for w, l in marks if l.lower().startswith("fault")), None)
    running = next((w for w, l in marks if l.lower().startswith("running")), None)
    if fault is not None and running is not None and running > fault:
        e.append(f'<rect class="lost" x="{x(fault):.1f}" y="{top}" '
                 f'width="{x(running) - x(fault):.1f}" height="{ph}" fill="#d62728" '
                 'fill-opacity="0.08"/>')
        e.append(f'<text x="{(x(fault) + x(running)) / 2:.1f}" y="{top + ph - 8}" '
                 f'text-anchor="middle" fill="#d62728">{running - fault:.1f} s lost</text>')
    # Axes and grid.
    e.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#000"/>')
    e.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#000"/>')
    step_t = next(v for v in (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 1800, 3600, 1 << 30)
                  if span / v <= 12)
    v = 0.0
    while v <= span + 1e-9:
        e.append(f'<line x1="{x(t0 + v):.1f}" y1="{top}" x2="{x(t0 + v):.1f}" y2="{top + ph}" '
                 'stroke="#eee"/>')
        e.append(f'<text x="{x(t0 + v):.1f}" y="{top + ph + 18}" text-anchor="middle">'
                 f'{v:g}</text>')
        v += step_t
    step_s = next(v for v in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                              1 << 40) if max(s_max, 1) / v <= 10)
    for s in range(0, s_max + 1, step_s):
        e.append(f'<text x="{left - 8}" y="{y(s) + 4:.1f}" text-anchor="end">{s}</text>')
    e.append(f'<text x="{left + pw / 2}" y="{height - 18}" text-anchor="middle">'
             'seconds since the first step</text>')
    e.append(f'<text transform="translate(18,{top + ph / 2}) rotate(-90)" '
             'text-anchor="middle">training step</text>')
    # One line per rank (a new segment after each resume). Ranks of a synchronous job move in
    # lock step, so their lines coincide: each is drawn thinner than the one below it, and every
    # rank stays visible as a band of its colour.
    n = len(ranks)
    for i, (rank, pts) in enumerate(sorted(ranks.items())):
        colour = COLOURS[i % len(COLOURS)]
        width_px = 1.5 + 2.0 * (n - 1 - i)
        for seg in segments(pts):
            coords = " ".join(f"{x(t):.1f},{y(s):.1f}" for t, s in seg)
            e.append(f'<polyline class="rank" data-rank="{rank}" points="{coords}" fill="none" '
                     f'stroke="{colour}" stroke-width="{width_px:.1f}" '
                     'stroke-linejoin="round"/>')
        ly = top + 12 + 18 * i
        e.append(f'<line x1="{left + pw + 20}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" '
                 f'stroke="{colour}" stroke-width="2"/>')
        e.append(f'<text x="{left + pw + 46}" y="{ly + 4}">rank {rank}</text>')
    # Marks: dashed vertical lines, labels listed in the legend with their time.
    base = top + 12 + 18 * len(ranks) + 14
    for j, (w, label) in enumerate(sorted(marks)):
        colour = mark_colour(label)
        e.append(f'<line class="mark" x1="{x(w):.1f}" y1="{top}" x2="{x(w):.1f}" '
                 f'y2="{top + ph}" stroke="{colour}" stroke-dasharray="5,4" stroke-width="1.4"/>')
        e.append(f'<text x="{x(w) + 3:.1f}" y="{top + 12 + 14 * (j % 5)}" fill="{colour}">'
                 f'{j + 1}</text>')
        e.append(f'<text x="{left + pw + 20}" y="{base + 18 * j}" fill="{colour}">'
                 f'{j + 1} {html.escape(label)} (+{w - t0:.1f} s)</text>')
    e.append("</svg>")
    return "\n".join(e) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", required=True)
    ap.add_argument("--mark", action="append", default=[])
    ap.add_argument("--title", default="Training steps per rank")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    try:
        marks = []
        for m in a.mark:
            if "=" not in m:
                raise InputError(f"mark {m!r} is not WHEN=LABEL")
            when, label = m.split("=", 1)
            marks.append((parse_when(when), label))
        svg = render(read_steps(a.steps), marks, a.title)
    except (InputError, OSError) as e:
        print(f"c4-timeline: {e}", file=sys.stderr)
        return 2
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
