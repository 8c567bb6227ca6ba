#!/usr/bin/env python3
"""Draws `kvscope-cli eval --json`'s KL by position as an SVG (standard library only): one curve per config, the
mean KL of each bin of positions, on a log scale. Prints the same bins as a Markdown table.

    kvscope-cli eval --text resources/eval/coriolanus.txt --ctx 8192 --windows 1 --cache fp8 --json > kl.json
    tests/bench/plot_kl_by_position.py kl.json --bin 512 --svg docs/img/kl_by_position.svg
"""
import argparse
import json
import math
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def bins(kl, width):
    """(first position, mean KL) of each bin that holds a scored position."""
    out = []
    for start in range(0, len(kl), width):
        vals = [v for v in kl[start:start + width] if v is not None]
        if vals:
            out.append((start, sum(vals) / len(vals)))
    return out


def svg(curves, width, title):
    right = 50 + 7 * max(len(name) for name, _ in curves)  # the legend's room
    w, h, left, top, bottom = 530 + right, 420, 70, 40, 50
    xs = [x for _, pts in curves for x, _ in pts]
    ys = [y for _, pts in curves for _, y in pts if y > 0]
    if not xs or not ys:
        raise SystemExit("nothing to plot: no config has a finite KL above 0")
    x1 = max(xs) + width
    ylo, yhi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if ylo == yhi:
        yhi += 1

    def px(x):
        return left + (x / x1) * (w - left - right)

    def py(y):
        return top + (yhi - math.log10(max(y, 10 ** ylo))) / (yhi - ylo) * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{title}</text>']
    for e in range(ylo, yhi + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    step = 1024 if x1 > 4096 else 256
    for x in range(0, x1 + 1, step):
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{h - bottom}" y2="{h - bottom + 4}" stroke="#333"/>')
        out.append(f'<text x="{px(x):.1f}" y="{h - bottom + 18}" text-anchor="middle">{x}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" '
               f'stroke="#333"/>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">position in the window '
               f'(bins of {width})</text>')
    out.append(f'<text transform="translate(16,{(top + h - bottom) / 2}) rotate(-90)" text-anchor="middle">'
               f'mean KL vs the unquantized cache</text>')
    for i, (name, pts) in enumerate(curves):
        c = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x + width / 2):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        ly = top + 16 + 18 * i
        out.append(f'<line x1="{w - right + 12}" x2="{w - right + 32}" y1="{ly - 4}" y2="{ly - 4}" stroke="{c}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{w - right + 38}" y="{ly}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="kvscope-cli eval --json output (one object per config)")
    ap.add_argument("--bin", type=int, default=512, help="positions per bin (default 512)")
    ap.add_argument("--svg", help="write the chart here")
    ap.add_argument("--title", default="KL by position")
    a = ap.parse_args()
    if a.bin < 1:
        raise SystemExit("--bin must be at least 1")
    curves = []
    with open(a.json) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{a.json}:{n}: not JSON ({e})")
            if r.get("kl_by_position"):
                curves.append((r["config"], bins(r["kl_by_position"], a.bin)))
    if not curves:
        raise SystemExit(f"{a.json}: no config has kl_by_position (run eval with --json)")
    starts = sorted({x for _, pts in curves for x, _ in pts})
    print("| config | " + " | ".join(f"{s}-{s + a.bin - 1}" for s in starts) + " |")
    print("|---" * (len(starts) + 1) + "|")
    for name, pts in curves:
        d = dict(pts)
        print(f"| {name} | " + " | ".join(f"{d[s]:.4f}" if s in d else "" for s in starts) + " |")
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(curves, a.bin, a.title))


if __name__ == "__main__":
    sys.exit(main())
