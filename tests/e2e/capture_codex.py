"""Capture what Codex CLI really sends: runs the pinned CLI headless against
the mock Responses upstream directly (no proxy in between) and writes every
request it made to OUTDIR, one JSON file per request (method, path, headers
with the key masked, body), plus a summary of each request's shape.

    .venv/bin/python tests/e2e/capture_codex.py OUTDIR [--limit N]

The mock plays the model: turn 1 asks for ``exec_command`` of a ~40 KB file
(``cat``, ``"login": false``), then a failing command, then a command that
outlives its ``yield_time_ms`` and a ``write_stdin`` to collect it, then a
final message; turn 2 goes through ``codex exec resume --last``. ``--limit N``
sets ``tool_output_token_limit`` (without it Codex cuts outputs itself).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import codex  # noqa: E402
import mock_responses as mr  # noqa: E402

FIRST, SECOND = "CAPTURE-FIRST", "CAPTURE-SECOND"


def scenario(target: Path):
    steps = [
        ("call_capture_cat", {"cmd": f"cat {target}", "login": False, "yield_time_ms": 10000, "max_output_tokens": 20000}),
        ("call_capture_fail", {"cmd": "echo to-stderr >&2; echo partial; exit 3", "login": False}),
        ("call_capture_slow", {"cmd": "sleep 2; echo late-line", "login": False, "yield_time_ms": 250}),
    ]

    def script(r: mr.Recorded):
        conv = r.conversation or []
        texts = mr.user_texts(conv)
        last = mr.last_tool_outputs(conv)
        if SECOND in (texts[-1] if texts else "") and not last:
            return [mr.message("CAPTURE-SECOND-DONE", phase="final_answer")]
        if not any(FIRST in t for t in texts):
            return None
        done = {o["call_id"] for o in mr.tool_outputs(conv)}
        for call_id, args in steps:
            if call_id not in done:
                return [mr.reasoning(f"Next: {call_id}."),
                        mr.function_call(call_id, "exec_command", args)]
        if "call_capture_stdin" not in done:
            slow = next(o for o in mr.tool_outputs(conv) if o["call_id"] == "call_capture_slow")
            text = mr.output_text_of(slow["output"])
            session = None
            for line in text.splitlines():
                if "session ID" in line:
                    session = int("".join(c for c in line if c.isdigit()))
            if session is not None:
                return [mr.reasoning("Collect it."), mr.function_call(
                    "call_capture_stdin", "write_stdin", {"session_id": session, "chars": "", "yield_time_ms": 5000})]
        return [mr.reasoning("Done."), mr.message("CAPTURE-DONE", phase="final_answer")]

    return script


def masked(headers):
    return [(k, "<masked>" if k in ("authorization",) else v) for k, v in headers]


def shape(value, depth=0):
    """A short description of a JSON value's shape (keys in order)."""
    if isinstance(value, dict):
        if depth > 2:
            return "{...}"
        return {k: shape(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0], depth + 1), f"x{len(value)}"] if value else []
    if isinstance(value, str):
        return f"str({len(value)})"
    return value


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--limit", type=int)
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    mock = mr.start()
    mock.strict = True
    extra = ["-c", f"tool_output_token_limit={args.limit}"] if args.limit else []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            work = tmp / "work"
            work.mkdir()
            data = work / "routes.json"
            data.write_text(json.dumps({"routes": [f"/api/v{i % 3}/resource_{i:04d}" for i in range(1400)]},
                                       indent=2))
            mock.script = scenario(data)
            runs = [codex.exec_(f"{FIRST} Please look at {data}.", base_url=mock.url + "/v1", home=tmp / "home",
                                cwd=work, ephemeral=False, extra=extra + ["--json"]),
                    codex.exec_(f"{SECOND} And now?", base_url=mock.url + "/v1", home=tmp / "home", cwd=work,
                                resume=True, extra=extra + ["--json"])]
            for run in runs:
                print(run.describe())
                print("last message:", run.last_message)
            (out / "size.txt").write_text(f"{data.stat().st_size}\n")
    finally:
        mock.stop()
    summary = []
    posts = mock.responses_posts()
    for i, (a, b) in enumerate(zip(posts, posts[1:])):
        # Codex's body begins model, stream, input, tools: is the previous
        # request's text up to the end of its input a byte prefix of this one?
        end = a.body.find(b'],"tools":')
        summary.append(f"request {i + 1} begins with request {i}'s bytes up to the end of its input: "
                       f"{end > 0 and b.body.startswith(a.body[:end])}")
    for i, r in enumerate(mock.requests()):
        (out / f"{i:02d}.body").write_bytes(r.body)
        body = r.json if r.json is not None else r.body.decode(errors="replace")
        (out / f"{i:02d}.json").write_text(json.dumps(
            {"method": r.method, "path": r.path, "status": r.status, "headers": masked(r.headers), "body": body,
             "response": r.response}, indent=1))
        line = f"{i:02d} {r.method} {r.path} -> {r.status} {len(r.body)}B"
        if isinstance(r.json, dict):
            j = r.json
            line += f"\n   keys={list(j)}"
            for item in mr.items_of(j.get("input")):
                line += f"\n   {json.dumps(shape(item))[:300]}"
        summary.append(line)
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
