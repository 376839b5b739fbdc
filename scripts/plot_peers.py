#!/usr/bin/env python3
"""Plot the peers bench (benches/peers.rs): ns/frame against frame size, one line per row.

Run the bench, then this script (python3, standard library only), from the repository root:

    GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 cargo bench -p packetpipe-perf --bench peers
    python3 scripts/plot_peers.py --note "2-vCPU AMD EPYC VM, idle, glibc tunable on"

It writes docs/peers.svg (two panels, threads and tasks; x = frame size, y = ns/frame, both log
scale) and prints markdown tables of ns/frame per mode, size and row, with the ratio to the best of
`duplex` and `piper` and to `memcpy` in the same run (for BENCHMARKS.md).

Where the figures come from: criterion stores each benchmark under
target/criterion/<group>/<function>/new/, the group `peers/<mode>/<size>` made filename-safe
(`peers_threads_64B`). benchmark.json names the group and function and holds the throughput
(`{"Elements": N}`: N frames per iteration); estimates.json holds criterion's estimates of the
time per iteration in ns (with `iter_custom`, the duration returned divided by the iterations).
ns/frame = the median's point estimate / N. The script finds the benchmarks by their
benchmark.json, not by directory name.

Options: --criterion DIR (default target/criterion), --out FILE (default docs/peers.svg),
--note TEXT (a line under the title: machine, load, settings).
"""

import argparse
import glob
import json
import math
import os
import sys

MODES = ["threads", "tasks"]
SIZES = ["64B", "4KiB", "64KiB"]
SIZE_BYTES = {"64B": 64, "4KiB": 4096, "64KiB": 65536}
SIZE_TEXT = {"64B": "64 B", "4KiB": "4 KiB", "64KiB": "64 KiB"}
ROWS = [
    "packetpipe_write",
    "packetpipe_buffer_mut",
    "packetpipe_frames",
    "duplex",
    "piper",
    "mpsc_bytes",
    "rtrb",
    "memcpy",
]
# Colour, marker shape, dashed.
STYLE = {
    "packetpipe_write": ("#d62728", "circle", False),
    "packetpipe_buffer_mut": ("#ff7f0e", "square", False),
    "packetpipe_frames": ("#8c564b", "diamond", False),
    "duplex": ("#1f77b4", "triangle", True),
    "piper": ("#2ca02c", "triangle_down", True),
    "mpsc_bytes": ("#9467bd", "square", True),
    "rtrb": ("#7f7f7f", "diamond", True),
    "memcpy": ("#000000", "cross", True),
}


def load(criterion_dir):
    """{(mode, size, row): ns per frame} from criterion's files."""
    results = {}
    pattern = os.path.join(criterion_dir, "*", "*", "new", "benchmark.json")
    for path in glob.glob(pattern):
        with open(path) as f:
            bench = json.load(f)
        parts = bench.get("group_id", "").split("/")
        if len(parts) != 3 or parts[0] != "peers":
            continue
        mode, size, row = parts[1], parts[2], bench["function_id"]
        throughput = bench.get("throughput") or {}
        frames = throughput.get("Elements")
        if not frames:
            sys.exit(f"{path}: no Elements throughput, cannot compute ns/frame")
        with open(os.path.join(os.path.dirname(path), "estimates.json")) as f:
            estimates = json.load(f)
        results[(mode, size, row)] = estimates["median"]["point_estimate"] / frames
    return results


def fmt_ns(ns):
    if ns >= 1000:
        return f"{ns / 1000:,.2f} µs"
    return f"{ns:,.1f} ns"


def fmt_ratio(r):
    return "" if r is None else f"{r:.2f}"


def tables(results):
    out = []
    for mode in MODES:
        rows = [r for r in ROWS if any((mode, s, r) in results for s in SIZES)]
        if not rows:
            continue
        out.append(f"#### {mode}\n")
        head = "| row |"
        rule = "|---|"
        for size in SIZES:
            head += f" {SIZE_TEXT[size]} | / duplex, piper | / memcpy |"
            rule += "---:|---:|---:|"
        out += [head, rule]
        for row in rows:
            line = f"| `{row}` |"
            for size in SIZES:
                t = results.get((mode, size, row))
                peers = [results[(mode, size, p)] for p in ("duplex", "piper") if (mode, size, p) in results]
                floor = results.get((mode, size, "memcpy"))
                if t is None:
                    line += " | | |"
                    continue
                vs_peer = t / min(peers) if peers else None
                vs_floor = t / floor if floor else None
                line += f" {fmt_ns(t)} | {fmt_ratio(vs_peer)} | {fmt_ratio(vs_floor)} |"
            out.append(line)
        out.append("")
    return "\n".join(out)


def nice_ticks(lo, hi):
    """1-2-5 ticks covering [lo, hi] (log scale)."""
    ticks = []
    e = math.floor(math.log10(lo))
    while True:
        for m in (1, 2, 5):
            v = m * 10**e
            if v > hi * 1.0001:
                return ticks
            if v >= lo / 1.0001:
                ticks.append(v)
        e += 1


def tick_label(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:g} µs"
    return f"{ns:g} ns"


def marker(shape, x, y, colour, r=4.5):
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}"/>'
    if shape == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" fill="{colour}"/>'
    if shape == "diamond":
        pts = [(x, y - r * 1.3), (x + r * 1.3, y), (x, y + r * 1.3), (x - r * 1.3, y)]
    elif shape == "triangle":
        pts = [(x, y - r * 1.2), (x + r * 1.2, y + r), (x - r * 1.2, y + r)]
    elif shape == "triangle_down":
        pts = [(x, y + r * 1.2), (x + r * 1.2, y - r), (x - r * 1.2, y - r)]
    else:  # cross
        return (
            f'<path d="M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}'
            f'M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}" stroke="{colour}" stroke-width="2"/>'
        )
    points = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
    return f'<polygon points="{points}" fill="{colour}"/>'


def svg(results, note):
    values = list(results.values())
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    panel_w, panel_h = 420, 380
    left, top, gap = 80, 84, 90
    legend_h = 24 * ((len(ROWS) + 3) // 4) + 20
    width = left + 2 * panel_w + gap + 30
    height = top + panel_h + 60 + legend_h
    xmin, xmax = math.log2(64) - 0.4, math.log2(65536) + 0.4

    def px(size_bytes, x0):
        return x0 + (math.log2(size_bytes) - xmin) / (xmax - xmin) * panel_w

    def py(ns):
        return top + panel_h - (math.log10(ns) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * panel_h

    s = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">'
        "Streaming length-prefixed frames producer -&gt; consumer: time per frame (median)</text>",
    ]
    if note:
        s.append(f'<text x="{width / 2}" y="44" text-anchor="middle" fill="#444">{escape(note)}</text>')
    for i, mode in enumerate(MODES):
        x0 = left + i * (panel_w + gap)
        title = "two OS threads, blocking" if mode == "threads" else "two tokio tasks, 2 workers"
        s.append(f'<text x="{x0 + panel_w / 2}" y="{top - 10}" text-anchor="middle" font-size="14">{mode}: {title}</text>')
        s.append(f'<rect x="{x0}" y="{top}" width="{panel_w}" height="{panel_h}" fill="none" stroke="#333"/>')
        for t in nice_ticks(lo, hi):
            y = py(t)
            major = abs(math.log10(t) - round(math.log10(t))) < 1e-9
            s.append(
                f'<line x1="{x0}" x2="{x0 + panel_w}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{"#bbb" if major else "#e4e4e4"}"/>'
            )
            s.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_label(t)}</text>')
        for size_bytes, text in ((256, "256 B"), (1024, "1 KiB"), (16384, "16 KiB")):
            x = px(size_bytes, x0)
            s.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + panel_h}" stroke="#f0f0f0"/>')
            s.append(f'<text x="{x:.1f}" y="{top + panel_h + 18}" text-anchor="middle" fill="#999">{text}</text>')
        for size in SIZES:
            x = px(SIZE_BYTES[size], x0)
            s.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + panel_h}" stroke="#e4e4e4"/>')
            s.append(f'<text x="{x:.1f}" y="{top + panel_h + 18}" text-anchor="middle">{SIZE_TEXT[size]}</text>')
        s.append(
            f'<text x="{x0 + panel_w / 2}" y="{top + panel_h + 40}" text-anchor="middle">'
            "frame payload size (log scale)</text>"
        )
        yc = top + panel_h / 2
        s.append(
            f'<text x="{x0 - 62}" y="{yc}" text-anchor="middle" transform="rotate(-90 {x0 - 62} {yc})">'
            "time per frame (log scale)</text>"
        )
        for row in ROWS:
            colour, shape, dashed = STYLE[row]
            pts = [(px(SIZE_BYTES[sz], x0), py(results[(mode, sz, row)])) for sz in SIZES if (mode, sz, row) in results]
            if not pts:
                continue
            path = " ".join(f"{'M' if k == 0 else 'L'}{x:.1f},{y:.1f}" for k, (x, y) in enumerate(pts))
            dash = ' stroke-dasharray="6 4"' if dashed else ""
            s.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            s += [marker(shape, x, y, colour) for x, y in pts]
    # Legend: four entries per line, under the panels.
    ly = top + panel_h + 62
    for k, row in enumerate(ROWS):
        colour, shape, dashed = STYLE[row]
        x = left + (k % 4) * ((2 * panel_w + gap) / 4)
        y = ly + (k // 4) * 24
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        s.append(f'<line x1="{x}" x2="{x + 34}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>')
        s.append(marker(shape, x + 17, y, colour))
        s.append(f'<text x="{x + 42}" y="{y + 4}">{row}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--criterion", default="target/criterion")
    ap.add_argument("--out", default="docs/peers.svg")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    results = load(args.criterion)
    if not results:
        sys.exit(f"no peers results under {args.criterion}: run `cargo bench -p packetpipe-perf --bench peers` first")
    missing = [
        f"{m}/{s}/{r}" for m in MODES for s in SIZES for r in ROWS
        if (m, s, r) not in results and not (m == "tasks" and r == "rtrb")
    ]
    if missing:
        print(f"warning: no results for {', '.join(missing)}", file=sys.stderr)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(svg(results, args.note))
    print(f"wrote {args.out}\n")
    print("ns/frame: criterion's median per iteration / frames per iteration; ratios against the")
    print("best of duplex and piper, and against memcpy, at the same mode and size, same run.\n")
    print(tables(results))


if __name__ == "__main__":
    main()
