#!/usr/bin/env python3
"""Prints the synopsis throughput table of BENCHMARKS.md from criterion's
saved estimates (run `cargo bench --bench synopsis` first).

Median time per input, throughput = input bytes / median, and the linearity
ratio time(10 MB) / time(1 MB) (the goal: at most 11)."""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent / "target" / "criterion"
kinds = ["json", "csv", "tsv", "yaml", "xml", "code", "text", "unknown"]
sizes = ["100KB", "1MB", "10MB"]


def estimate(group, bench):
    base = root / group / bench / "new"
    try:
        est = json.loads((base / "estimates.json").read_text())
        bench_meta = json.loads((base / "benchmark.json").read_text())
    except FileNotFoundError:
        return None
    nanos = est["median"]["point_estimate"]
    throughput = bench_meta.get("throughput") or {}
    size = throughput.get("Bytes") or throughput.get("BytesDecimal")
    return nanos, size


print("| kind | 100 KB | 1 MB | 10 MB | 10 MB / 1 MB time |")
print("|---|---|---|---|---|")
for kind in kinds:
    cells = []
    times = {}
    for size in sizes:
        got = estimate(f"synopsis_{kind}", size)
        if got is None:
            cells.append("-")
            continue
        nanos, nbytes = got
        times[size] = nanos
        mbps = nbytes / (nanos / 1e9) / 1e6
        cells.append(f"{mbps:,.0f} MB/s ({nanos / 1e6:.2f} ms)")
    ratio = f"{times['10MB'] / times['1MB']:.1f}x" if "10MB" in times and "1MB" in times else "-"
    print(f"| {kind} | " + " | ".join(cells) + f" | {ratio} |")

for path in sorted((root / "synopsis_json_5000_objects").glob("*KB")):
    got = estimate("synopsis_json_5000_objects", path.name)
    if got:
        nanos, nbytes = got
        print(f"\nJSON array of 5,000 objects ({nbytes / 1e6:.2f} MB): median {nanos / 1e6:.2f} ms")
sys.exit(0)
