#!/usr/bin/env python3
"""The replay's table of rules tried (BENCHMARKS.md, "Savings on real sessions").

Runs `toolstub estimate --json --shape all` over the shared trajectories once
per rule (a config file written to a temporary folder) and prints one markdown
row per rule and shape: net billed input saved at each price model (recalls
included), the sessions that cost more and the worst of them, recall rounds,
outputs externalized, peak context.

    cargo build --release
    python3 scripts/savings_table.py [TRAJECTORIES] [--bin target/release/toolstub]
    python3 scripts/savings_table.py --bound   # the share old outputs hold

`--bound` prints, instead, what a free rule could remove at most: the share
of the characters the agent's requests carry that are observations the model
saw at least one turn earlier (all, and those over 1,000 characters less a
500-character stub).

`--sets NAME=PATH ...` prints, instead, one row per set of sessions (any
format `toolstub estimate` reads, each in its own shape) at the default
policy, net of recalls and with no recall charged:

    python3 scripts/savings_table.py --sets tau-bench=../shared/sessions/openai-chat/tau-bench-gpt-4o-airline.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

RULES = [
    ("defaults", ""),
    ("threshold 10,000 (first sight)", "threshold_chars = 10000"),
    ("conversation budget 100,000 / 8,000", "conversation_inline_budget_chars = 100000\nconversation_floor_chars = 8000"),
    ("aged after 1 turn, pays at once (0.92), floor 4,000", "aged_after_turns = 1\naged_floor_chars = 4000\naged_min_share = 0.92"),
    ("aged after 2 turns, share 0.5, floor 1,000", "aged_after_turns = 2\naged_floor_chars = 1000\naged_min_share = 0.5"),
    ("aged after 4 turns, share 0.3, floor 1,000", "aged_after_turns = 4\naged_floor_chars = 1000\naged_min_share = 0.3"),
    ("aged after 3 turns, pays within 0.5 x turns so far, floor 2,000", "aged_after_turns = 3\naged_floor_chars = 2000\naged_min_share = 0.92\naged_horizon = 0.5"),
    ("aged after 3 turns, pays within 1 x turns so far, floor 2,000", "aged_after_turns = 3\naged_floor_chars = 2000\naged_min_share = 0.92\naged_horizon = 1.0"),
    ("aged after 4 turns, no gate, floor 1,000", "aged_after_turns = 4\naged_floor_chars = 1000\naged_min_share = 0"),
    ("aged after 8 turns, no gate, floor 2,000", "aged_after_turns = 8\naged_floor_chars = 2000\naged_min_share = 0"),
    ("aged after 1 turn, no gate, floor 2,000", "aged_after_turns = 1\naged_floor_chars = 2000\naged_min_share = 0"),
    ("aged after 1 turn, no gate, floor 1,000", "aged_after_turns = 1\naged_floor_chars = 1000\naged_min_share = 0"),
    ("aged after 1 turn, no gate, floor 300", "aged_after_turns = 1\naged_floor_chars = 300\naged_min_share = 0"),
    ("aged after 1 turn, no gate, floor 300, no recall charged (the ceiling)",
     "aged_after_turns = 1\naged_floor_chars = 300\naged_min_share = 0", ["--free-recalls"]),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trajectories", nargs="?", default="../shared/trajectories/mini-swe-agent")
    ap.add_argument("--bin", default="target/release/toolstub")
    ap.add_argument("--bound", action="store_true")
    ap.add_argument("--sets", nargs="+", metavar="NAME=PATH")
    args = ap.parse_args()
    if args.bound:
        return bound(Path(args.trajectories))
    if args.sets:
        return sets(args.bin, args.sets)
    print("| rule | shape | saved, Anthropic prices | saved, OpenAI prices | sessions costlier (A / O) | worst session (A / O) "
          "| recall rounds | outputs externalized | peak context (tokens) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, body, *extra in RULES:
            config = Path(tmp) / "rule.toml"
            config.write_text(f"[externalization]\n{body}\n")
            flags = extra[0] if extra else []
            out = subprocess.run([args.bin, "estimate", "--json", "--shape", "all", "--config", str(config),
                                  *flags, args.trajectories], capture_output=True, text=True, check=True)
            report = json.loads(out.stdout)
            by_shape: dict[str, dict] = defaultdict(lambda: defaultdict(float))
            for s in report["per_session"]:
                a = by_shape[s["shape"]]
                a["recall"] += s["recall_rounds"]
                a["outputs"] += s["outputs_externalized"]
                a["peak_direct"] = max(a["peak_direct"], s["peak_context"]["direct"])
                a["peak_toolstub"] = max(a["peak_toolstub"], s["peak_context"]["toolstub"])
                for m in s["models"]:
                    n = m["price_model"]["name"]
                    a[n + "_direct"] += m["direct_usd"]
                    a[n + "_toolstub"] += m["toolstub_usd"]
                    a[n + "_costlier"] += m["saved_usd"] < 0
                    a[n + "_worst"] = min(a.get(n + "_worst", m["saved_fraction"]), m["saved_fraction"])
            for shape in ("chat", "anthropic", "responses"):
                a = by_shape[shape]
                saved = {n: 1 - a[n + "_toolstub"] / a[n + "_direct"] for n in ("anthropic", "openai")}
                print(f"| {name} | {shape} | {saved['anthropic']:+.2%} | {saved['openai']:+.2%} "
                      f"| {int(a['anthropic_costlier'])} / {int(a['openai_costlier'])} "
                      f"| {a['anthropic_worst']:+.1%} / {a['openai_worst']:+.1%} | {int(a['recall'])} "
                      f"| {int(a['outputs'])} | {int(a['peak_direct']):,} -> {int(a['peak_toolstub']):,} |", flush=True)
    return 0


def sets(binary: str, named: list[str]) -> int:
    print("| sessions | recalls | sessions (requests) | saved, Anthropic prices | saved, OpenAI prices "
          "| sessions costlier (A / O) | recall rounds (per output) | characters read back "
          "| outputs externalized | peak context (tokens) | requests over the window |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for item in named:
        name, _, path = item.partition("=")
        for label, flags in (("charged", []), ("none charged", ["--free-recalls"])):
            out = subprocess.run([binary, "estimate", "--json", *flags, path], capture_output=True, text=True,
                                 check=True)
            report = json.loads(out.stdout)
            t = report["totals"]
            saved = {m["price_model"]["name"]: m["saved_fraction"] for m in t["by_price_model"]}
            costlier = defaultdict(int)
            for s in report["per_session"]:
                for m in s["models"]:
                    costlier[m["price_model"]["name"]] += m["saved_usd"] < 0
            print(f"| {name} | {label} | {t['sessions']} ({t['requests']:,}) | {saved['anthropic']:+.1%} "
                  f"| {saved['openai']:+.1%} | {costlier['anthropic']} / {costlier['openai']} "
                  f"| {t['recall_rounds']} ({t['recall_rounds_per_output']:.2f}) | {t['recall_read_chars']:,} "
                  f"| {t['outputs_externalized']} "
                  f"| {t['peak_context']['direct']:,} -> {t['peak_context']['toolstub']:,} "
                  f"| {t['over_window']['direct']:,} -> {t['over_window']['toolstub']:,} |", flush=True)
    return 0


def bound(folder: Path) -> int:
    total = old = big = 0
    for path in sorted(folder.glob("*.traj.json")):
        messages = json.loads(path.read_text())["messages"]
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            # The request before this answer: everything so far. The first
            # two messages are the system prompt and the task.
            prefix = messages[:i]
            total += sum(len(str(m["content"])) for m in prefix)
            for j in range(2, len(prefix)):
                if prefix[j]["role"] != "user" or not any(m["role"] == "assistant" for m in prefix[j + 1:]):
                    continue
                n = len(str(prefix[j]["content"]))
                old += n
                big += n - 500 if n > 1000 else 0
    print(f"observations seen a turn earlier: {old / total:.1%} of request characters; "
          f"over 1,000 characters, less a 500-character stub: {big / total:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
