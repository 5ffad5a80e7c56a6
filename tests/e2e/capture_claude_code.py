"""Capture what Claude Code really sends: runs the pinned CLI headless
against the mock Anthropic upstream directly (no proxy in between) and writes
every request it made to OUTDIR, one JSON file per request (method, path,
headers with the key masked, body as JSON or text), plus a summary.

    .venv/bin/python tests/e2e/capture_claude_code.py OUTDIR [read|bash|plain]

The scenario scripts the mock as the e2e tests do: the prompt asks for a
Read (or Bash) of a large output, the mock answers with that tool_use, then
with a final text once the tool_result is back; a second turn goes through
``claude -p --continue``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import claude_code  # noqa: E402
import mock_anthropic as ma  # noqa: E402


def scenario_script(kind: str, target: str):
    def script(r: ma.Recorded):
        body = r.json
        if "Read" not in ma.tool_names(body):
            return None  # a side call: the default text
        results = ma.last_tool_results(body)
        if results and results[0]["tool_use_id"] == "toolu_capture_1":
            return ma.message([ma.thinking("Now I know its size.", "sig_capture_2"),
                               ma.text("CAPTURE-DONE the output had "
                                       f"{len(ma.tool_result_text(results[0]))} characters")])
        if any("CAPTURE-SECOND" in t for t in ma.user_texts(body)[-1:]):
            return ma.message([ma.text("CAPTURE-SECOND-DONE")])
        if kind == "read":
            call = ma.tool_use("toolu_capture_1", "Read", {"file_path": target})
        elif kind == "bash":
            call = ma.tool_use("toolu_capture_1", "Bash", {"command": target, "description": "print the log"})
        else:
            return ma.message([ma.text("CAPTURE-PLAIN")])
        return ma.message([ma.thinking("I should look at it.", "sig_capture_1"), ma.text("Looking."), call],
                          "tool_use", id="msg_capture_1")
    return script


def masked(headers):
    return [(k, "<masked>" if k in ("x-api-key", "authorization") else v) for k, v in headers]


def main() -> int:
    out = Path(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "read"
    out.mkdir(parents=True, exist_ok=True)
    mock = ma.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            work = tmp / "work"
            work.mkdir()
            data = work / "data.json"
            data.write_text(json.dumps({"rows": [{"id": i, "name": f"row {i}", "ok": i % 3 == 0}
                                                 for i in range(700)]}, indent=2))
            log = work / "build.log"
            log.write_text("".join(f"line {i:05d} INFO compiling unit {i} of the capture build\n" for i in range(450)))
            target = str(data) if kind == "read" else f"cat {log}"
            mock.script = scenario_script(kind, target)
            runs = [claude_code.prompt(f"CAPTURE-FIRST Please look at {target}.", base_url=mock.url,
                                       home=tmp / "home", cwd=work),
                    claude_code.prompt("CAPTURE-SECOND And now?", base_url=mock.url, home=tmp / "home",
                                       cwd=work, cont=True)]
            for run in runs:
                print(run.describe())
    finally:
        mock.stop()
    summary = []
    for i, r in enumerate(mock.requests()):
        body = r.json if r.json is not None else r.body.decode(errors="replace")
        (out / f"{i:02d}.json").write_text(json.dumps(
            {"method": r.method, "path": r.path, "headers": masked(r.headers), "body": body}, indent=1))
        line = f"{i:02d} {r.method} {r.path} {len(r.body)}B"
        if isinstance(r.json, dict):
            j = r.json
            line += (f" model={j.get('model')} stream={j.get('stream')} tools={len(j.get('tools') or [])}"
                     f" messages={len(j.get('messages') or [])} thinking={j.get('thinking')}")
        summary.append(line)
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
