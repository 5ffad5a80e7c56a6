"""End to end with the real opencode (`opencode run`, headless) through
`toolstub wrap -- opencode ...`, against the mock Anthropic upstream.

wrap gives opencode its providers' base URLs in OPENCODE_CONFIG_CONTENT
(the AI SDK's providers append the API's path to a URL that ends in the
version, so ANTHROPIC_BASE_URL as Claude Code reads it would not do):
nothing is written to opencode's config. The mock plays the model: a bash
call with a large output, which arrives as a stub; a recall call on it,
answered inside the proxy; a final text quoting the read. opencode prints
the text and never sees the recall call; the next turn (`opencode run
--continue`) reaches the upstream with the hidden exchange restored.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

import mock_anthropic as ma
import mock_responses as mr
import opencode
from anthropic_support import STUB_HEADER, assert_faithful, tenant_of
from conftest import toolstub_bin
from test_claude_code import TURN1, TURN2, ClaudeCodeScript, build_log
from test_wrap import describe, summary, wrap

TOOL = "bash"


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def main_posts(amock, text: str) -> list[ma.Recorded]:
    """The agent's requests (not its title calls) of the turn asking ``text``."""
    return [r for r in amock.messages_posts() if TOOL in ma.tool_names(r.json)
            and any(text in t for t in ma.user_texts(r.json))]


def test_opencode_through_wrap(amock, dirs, tmp_path):
    home, work = dirs
    nonce = secrets.token_hex(8)
    log_file = work / "build.log"
    log_file.write_text(build_log(nonce))
    marker = f"E2E-OPENCODE-{secrets.token_hex(4)}"
    script = amock.script = ClaudeCodeScript(TOOL, {"command": "cat build.log", "description": "Show the log"},
                                             marker)
    env = opencode.env_for(home)
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"

    def run(text: str, cont: bool = False) -> subprocess.CompletedProcess:
        return wrap(["--upstream", amock.url, "--db", str(db), "--log-file", str(log)],
                    opencode.command(text, cwd=work, cont=cont), env=env, cwd=work)

    p = run(f"{TURN1} Look at the build log, please.")
    assert p.returncode == 0, describe(p, log)
    assert marker in p.stdout and nonce in p.stdout, describe(p, log)
    assert "NOT-STUBBED" not in p.stdout and "tool_result_read" not in p.stdout, describe(p, log)
    assert script.round_b is not None and script.round_c is not None
    requests, externalized, saved, recalls = summary(p.stderr)
    assert externalized >= 1 and recalls == 1 and saved > 20_000, p.stderr
    assert not list(home.rglob("opencode.json*")), "wrap writes no opencode config"

    turn1 = main_posts(amock, TURN1)
    stubbed = [r for r in turn1 if any(ma.tool_result_text(b).startswith(STUB_HEADER)
                                       for b in ma.last_tool_results(r.json))]
    assert len(stubbed) == 1, [r.path for r in turn1]  # round B (round C ends with the recall result)
    [block] = [b for b in ma.last_tool_results(stubbed[0].json)]
    stub = ma.tool_result_text(block)
    out = subprocess.run(
        [str(toolstub_bin()), "results", "read", "--db", str(db),
         "--ref", ma.stub_ref(stub), "--tenant", tenant_of(opencode.ANTHROPIC_KEY), "--limit", "-1", "--json"],
        capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert nonce in json.loads(out.stdout)["content"]
    assert "tool_result_read" in ma.tool_names(stubbed[0].json)

    # Turn 2, at the default: the hidden exchange is back upstream all the
    # same (the round after the recall thinks, and its thinking block is
    # bound to the history it was made from), the stub unchanged.
    p2 = run(f"{TURN2} Anything else?", cont=True)
    assert p2.returncode == 0, describe(p2, log)
    assert f"{marker}-TURN-2 done" in p2.stdout, describe(p2, log)
    [turn2] = main_posts(amock, TURN2)
    msgs = turn2.json["messages"]
    assert stub in [ma.tool_result_text(b) for m in msgs if m["role"] == "user"
                    for b in ma.blocks(m["content"]) if b.get("type") == "tool_result"]
    [recall_use] = [b for m in msgs if m["role"] == "assistant" for b in ma.blocks(m["content"])
                    if b.get("type") == "tool_use" and b.get("name") == "tool_result_read"]
    assert_faithful(recall_use, script.round_b["content"][-1], "the recall call restored as sent")


class ResponsesScript:
    """The mock's model on the Responses API (opencode's OpenAI provider):
    bash with the large output, a recall of its stub, a final text."""

    CALL, RECALL = "call_opencode_bash_1", "call_opencode_recall_1"

    def __init__(self, marker: str):
        self.marker = marker
        self.final_text: str | None = None
        self.recalled = False

    def __call__(self, r: mr.Recorded):
        conv = r.conversation or []
        if TOOL not in mr.tool_names(r.json):
            return None
        last = mr.last_tool_outputs(conv)
        newest = (mr.user_texts(conv) or [""])[-1]
        if last and last[-1]["call_id"] == self.RECALL:
            read = json.loads(last[-1]["output"])
            self.final_text = f"{self.marker} read={json.dumps(read['content'][:120])}"
            return [mr.message(self.final_text)]
        if last and last[-1]["call_id"] == self.CALL:
            text = mr.output_text_of(last[-1]["output"])
            ref = mr.stub_ref(text) if text.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in mr.tool_names(r.json):
                return [mr.message(f"NOT-STUBBED ({len(text)} characters inline)")]
            self.recalled = True
            return [mr.function_call(self.RECALL, "tool_result_read", {"ref": ref, "offset": 0, "limit": 400})]
        if TURN1 in newest:
            return [mr.function_call(self.CALL, TOOL, {"command": "cat build.log", "description": "Show the log"})]
        return None


def test_opencode_openai_provider_through_wrap(rmock, dirs, tmp_path):
    home, work = dirs
    nonce = secrets.token_hex(8)
    (work / "build.log").write_text(build_log(nonce))
    marker = f"E2E-OPENCODE-OPENAI-{secrets.token_hex(4)}"
    script = rmock.script = ResponsesScript(marker)
    env = opencode.env_for(home)
    env["OPENAI_API_KEY"] = "sk-opencode-openai-e2e"
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"
    p = wrap(["--upstream", rmock.url, "--db", str(db), "--log-file", str(log)],
             opencode.command(f"{TURN1} Look at the build log, please.", cwd=work, model=opencode.OPENAI_MODEL),
             env=env, cwd=work)
    assert p.returncode == 0, describe(p, log)
    assert script.recalled and marker in p.stdout and nonce in p.stdout, describe(p, log)
    assert "tool_result_read" not in p.stdout, describe(p, log)
    assert all(r.route == "/v1/responses" for r in rmock.responses_posts()), [r.path for r in rmock.requests()]
    requests, externalized, saved, recalls = summary(p.stderr)
    assert externalized >= 1 and recalls == 1, p.stderr
