#!/usr/bin/env python3
"""The one-time cost of the first offer of the recall tools on Anthropic's
prompt cache, measured on the real Claude Code CLI's requests.

    ./scripts/e2e -q -k nothing   # once: installs .venv, Claude Code, builds the binary
    .venv/bin/python scripts/first_offer_cost.py [target/debug/toolstub]

Claude Code (headless, the pinned CLI of tests/e2e) reads a ~56 KB JSON file
through toolstub in front of the mock Anthropic upstream of tests/e2e; the
mock answers with a Read, then a final text. The request that carries the
Read result is the first over budget: toolstub stubs it and appends the
recall tools to `tools`. Tools head Anthropic's cache prefix (tools, system,
messages), so that request cannot read what the one before it cached: the
previous request's prompt up to its last cache breakpoint is written to the
cache again instead of read from it. This prints that prefix's size, the
characters the stub removes from the same request, and both in estimated
tokens (characters / 4) priced as
Anthropic's multipliers of the base input price: cache write 1.25x (5 min)
or 2x (1 h), cache read 0.1x.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import claude_code  # noqa: E402
import mock_anthropic as ma  # noqa: E402

CHARS_PER_TOKEN = 4


def script(target: str):
    def answer(r: ma.Recorded):
        body = r.json
        if "Read" not in ma.tool_names(body):
            return None
        if ma.last_tool_results(body):
            return ma.message([ma.text("COST-DONE")])
        return ma.message([ma.text("Reading."), ma.tool_use("toolu_cost_1", "Read", {"file_path": target})],
                          "tool_use", id="msg_cost_1")
    return answer


def pieces(body: dict) -> list[tuple[str, bool]]:
    """The prompt in cache order, one JSON text per tool, system block and
    content block, without its cache_control marker, and whether it had one."""
    out = []
    def piece(value) -> tuple[str, bool]:
        marked = isinstance(value, dict) and "cache_control" in value
        if marked:
            value = {k: v for k, v in value.items() if k != "cache_control"}
        return json.dumps(value, separators=(",", ":")), marked
    for tool in body.get("tools") or []:
        out.append(piece(tool))
    system = body.get("system") or []
    for block in ([{"type": "text", "text": system}] if isinstance(system, str) else system):
        out.append(piece(block))
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out.append((f"role {message['role']}", False))
        out.extend(piece(b) for b in blocks)
    return out


def main() -> int:
    binary = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "target" / "debug" / "toolstub")
    mock = ma.start()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = tmp / "work"
        work.mkdir()
        data = work / "data.json"
        data.write_text(json.dumps({"rows": [{"id": i, "name": f"row {i}", "ok": i % 3 == 0} for i in range(900)]},
                                   indent=2))
        mock.script = script(str(data))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proxy = subprocess.Popen([str(binary), "serve", "--listen", f"127.0.0.1:{port}", "--upstream", mock.url,
                                  "--db", str(tmp / "t.db")], stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.05)
            run = claude_code.prompt(f"Please look at {data}.", base_url=f"http://127.0.0.1:{port}",
                                     home=tmp / "home", cwd=work)
            if "COST-DONE" not in run.stdout:
                print(run.describe())
                return 1
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
            mock.stop()
    posts = [r for r in mock.requests() if r.is_messages()]
    offered = [i for i, r in enumerate(posts) if "tool_result_read" in ma.tool_names(r.json)]
    if not offered or offered[0] == 0:
        print("no request offered the recall tools after one that did not")
        return 1
    first = offered[0]
    before, at = pieces(posts[first - 1].json), pieces(posts[first].json)
    last = max(i for i, (_, marked) in enumerate(before) if marked)
    cached = sum(len(p) for p, _ in before[: last + 1])
    kept = 0
    for (a, _), (b, _) in zip(before, at):
        if a != b:
            break
        kept += len(a)
    results = [b for b in ma.tool_results(posts[first].json)]
    stub = ma.tool_result_text(results[-1])
    listing_chars = int(next(l for l in stub.splitlines() if l.startswith("original_chars: ")).split(": ")[1])
    saved = listing_chars - len(stub)
    tools_added = sum(len(json.dumps(t, separators=(",", ":"))) for t in posts[first].json["tools"]
                      if t["name"].startswith("tool_result_"))
    tok = lambda chars: chars / CHARS_PER_TOKEN  # noqa: E731
    print(f"requests: {len(posts)} messages requests; the recall tools first offered on request {first + 1}")
    print(f"| | characters | est. tokens |")
    print(f"|---|---|---|")
    print(f"| cached prefix of the request before (tools + system + messages to its last breakpoint) | {cached:,} | {tok(cached):,.0f} |")
    print(f"| of it, kept byte for byte before the first change (the first offer changes `tools`) | {kept:,} | {tok(kept):,.0f} |")
    print(f"| recall tool definitions added | {tools_added:,} | {tok(tools_added):,.0f} |")
    print(f"| the Read result (line-numbered listing) | {listing_chars:,} | {tok(listing_chars):,.0f} |")
    print(f"| its stub | {len(stub):,} | {tok(len(stub)):,.0f} |")
    print(f"| removed from this request and every later one | {saved:,} | {tok(saved):,.0f} |")
    lost = tok(cached)
    print()
    print(f"one-time cost: {lost:,.0f} tokens written instead of read: +{lost * (1.25 - 0.1):,.0f} base-input-token "
          f"equivalents (5 min cache; +{lost * (2.0 - 0.1):,.0f} with the 1 h cache)")
    print(f"the same request saves {tok(saved):,.0f} tokens at the cache-write price: {tok(saved) * 1.25:,.0f} "
          f"equivalents (5 min), and every later turn {tok(saved) * 0.1:,.0f} at the cache-read price")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
