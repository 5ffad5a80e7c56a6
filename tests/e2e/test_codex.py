"""End-to-end with the real Codex CLI (`codex exec`, headless, pinned in
tests/e2e/package.json), through the real `toolstub serve` binary, against
the mock Responses upstream (mock_responses.py), with a custom provider:
``model_providers.<id> = {base_url = <proxy>/v1, wire_api = "responses", ...}``.

The mock plays the model, deciding each answer from the request's content:
turn 1 asks Codex to run ``exec_command`` (``cat`` of a ~38 KB file); once the
output comes back (as a stub) it calls tool_result_read on the stub's ref;
once the proxy appended the recall result, it answers with a final message
quoting it. Codex must print that message and never learn of the recall call.
Turn 2 (``codex exec resume --last``) resends the whole history (store:
false): upstream, the hidden exchange must be back in it, byte for byte.

Codex caps a tool output at 10,000 tokens by default (about 40 KB), cutting
the middle out (``…N chars truncated…``): the scripted call asks for
``max_output_tokens: 20000`` and Codex runs with ``tool_output_token_limit``
raised, so the whole file comes through.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

import codex
import mock_responses as mr
from responses_support import (RECALL_TOOLS, STUB_HEADER, assert_faithful, check_recall_round,
                               check_same_synopsis, check_stub, ordered, stored_original)

TOOL_ID = "call_codex_exec_1"
RECALL_ID = "call_codex_recall_1"
TURN1, TURN2 = "E2E-CODEX-TURN-1", "E2E-CODEX-TURN-2"
CREDENTIAL = f"Bearer {codex.API_KEY}"
EXTRA = ["--json", "-c", "tool_output_token_limit=40000"]
WRAPPER_HEAD = ("Chunk ID: ", "Wall time: ", "Process exited with code 0", "Original token count: ", "Output:")


def routes_json(nonce: str) -> str:
    routes = [f"/api/v{i % 3 + 1}/resource_{i:04d} -> handlers.resource_{i:04d}.{['get', 'put', 'list'][i % 3]}"
              for i in range(650)]
    text = json.dumps({"nonce": nonce, "service": "e2e-routes", "routes": routes}, indent=2)
    assert 34_000 < len(text) < 40_000, len(text)
    return text


def exec_args(cmd: str) -> dict:
    return {"cmd": cmd, "login": False, "yield_time_ms": 10000, "max_output_tokens": 20000}


class CodexScript:
    """The mock's model for one Codex test."""

    def __init__(self, cmd: str, marker: str, recall: bool = True):
        self.cmd, self.marker, self.recall = cmd, marker, recall
        self.final_text: str | None = None

    def __call__(self, r: mr.Recorded):
        conv = r.conversation or []
        outputs = {o["call_id"]: o for o in mr.tool_outputs(conv)}
        last = mr.last_tool_outputs(conv)
        texts = mr.user_texts(conv)
        newest = texts[-1] if texts else ""
        if last and last[-1]["call_id"] == RECALL_ID:
            read = json.loads(last[-1]["output"])
            self.final_text = (f"{self.marker} read={json.dumps(read['content'][:160])} "
                               f"total_chars={read['total_chars']}")
            return [mr.reasoning("I have what I need."), mr.message(self.final_text, phase="final_answer")]
        if TURN2 in newest:
            return [mr.message(f"{self.marker}-TURN-2 done", phase="final_answer")]
        if TOOL_ID in outputs and TURN1 in newest:
            text = mr.output_text_of(outputs[TOOL_ID]["output"])
            ref = mr.stub_ref(text) if text.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in mr.tool_names(r.json) or not self.recall:
                self.final_text = f"NOT-STUBBED ({len(text)} characters inline)"
                return [mr.message(self.final_text, phase="final_answer")]
            return [mr.reasoning("The output was externalized; read its start."),
                    mr.function_call(RECALL_ID, "tool_result_read", {"ref": ref, "offset": 0, "limit": 400})]
        if TURN1 in newest:
            return [mr.reasoning("I need to run it."), mr.function_call(TOOL_ID, "exec_command", exec_args(self.cmd))]
        return None


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def posts_with(rmock, text: str) -> list[mr.Recorded]:
    return [r for r in rmock.responses_posts() if any(text in t for t in mr.user_texts(r.conversation or [])[-1:])]


def assert_all_answered(rmock) -> None:
    bad = [(r.method, r.path, r.status, (r.response or {}).get("error")) for r in rmock.requests() if r.status != 200]
    assert not bad, f"requests the mock did not answer with 200: {bad}"


def exec_output(r: mr.Recorded) -> dict:
    [out] = [o for o in mr.tool_outputs(r.json["input"]) if o["call_id"] == TOOL_ID]
    return out


def test_codex_runs_against_the_mock_directly(rmock, dirs):
    """The harness itself, with no proxy: Codex runs the command, sends its
    wrapped output inline and prints the mock's final message."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    script = rmock.script = CodexScript(f"cat {target}", "DIRECT")
    run = codex.exec_(f"{TURN1} Look at {target}.", base_url=rmock.url + "/v1", home=home, cwd=work, extra=EXTRA)
    assert run.returncode == 0, run.describe()
    assert_all_answered(rmock)
    [second] = [r for r in rmock.responses_posts() if TOOL_ID in {o["call_id"] for o in mr.tool_outputs(r.json["input"])}]
    out = exec_output(second)
    assert list(out) == ["type", "id", "call_id", "output"] and out["id"].startswith("fco_"), out.keys()
    text = out["output"]
    lines = text.split("\n")
    for line, head in zip(lines, WRAPPER_HEAD):
        assert line.startswith(head), (line, head)
    assert text.split("Output:\n", 1)[1] == target.read_text(), "the whole file, not cut by Codex"
    assert run.last_message == script.final_text == f"NOT-STUBBED ({len(text)} characters inline)", run.describe()
    body = second.json
    assert body["store"] is False and body["stream"] is True
    assert body["include"] == ["reasoning.encrypted_content"]


def test_codex_exec_with_a_large_output_and_the_next_turn(rmock, rproxy, dirs):
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    marker = f"E2E-CODEX-DONE-{secrets.token_hex(4)}"
    script = rmock.script = CodexScript(f"cat {target}", marker)

    # Turn 1: exec_command, stub, hidden recall round, final message.
    run = codex.exec_(f"{TURN1} Look at {target}.", base_url=rproxy.url + "/v1", home=home, cwd=work,
                      ephemeral=False, extra=EXTRA)
    assert run.returncode == 0, run.describe()
    assert script.final_text is not None and "NOT-STUBBED" not in script.final_text, run.describe()
    assert run.last_message == script.final_text, run.describe()
    assert nonce in run.last_message, "the recall result did not reach the final round"
    assert "tool_result_read" not in run.stdout and RECALL_ID not in run.stdout, "Codex saw the recall call"
    assert_all_answered(rmock)
    turn1 = posts_with(rmock, TURN1)
    assert len(turn1) == 3, [len(r.json["input"]) for r in turn1]
    first, stubbed, recall = turn1
    assert not set(mr.tool_names(first.json)) & set(RECALL_TOOLS), "nothing to recall in the first request"

    # The exec_command output arrived as a stub, every other field as Codex sent it.
    out = exec_output(stubbed)
    assert list(out) == ["type", "id", "call_id", "output"] and out["id"].startswith("fco_"), out
    stub = out["output"]
    assert isinstance(stub, str) and stub.startswith(STUB_HEADER + "\n"), stub[:200]
    original = stored_original(rproxy, mr.stub_ref(stub), CREDENTIAL)
    check_stub(stub, call_id=TOOL_ID, original=original, tool_name="exec_command")
    assert original.split("Output:\n", 1)[1] == target.read_text(), "the original is Codex's output as sent"
    assert original.startswith("Chunk ID: ")
    assert "exit code 0" in stub and "kind: json" in stub.split("\n"), "the content's kind, the wrapper's exit code"
    check_same_synopsis(rproxy, stub, original, "exec_command", home)
    client_tools = first.json["tools"]
    assert ordered(stubbed.json["tools"][:len(client_tools)]) == ordered(client_tools)
    assert [t.get("name") for t in stubbed.json["tools"][len(client_tools):]] == RECALL_TOOLS
    assert_faithful(stubbed.json["input"][:len(first.json["input"])], first.json["input"],
                    "the request begins with the previous one, as Codex sent it")

    # The recall round: the stubbed request plus the hidden exchange.
    [read] = check_recall_round(stubbed, recall, [RECALL_ID])
    assert read["content"] == original[:400] and read["total_chars"] == len(original)

    # Turn 2: Codex resends the whole history; upstream the hidden round is back.
    run2 = codex.exec_(f"{TURN2} Anything else?", base_url=rproxy.url + "/v1", home=home, cwd=work, resume=True,
                       extra=EXTRA)
    assert run2.returncode == 0, run2.describe()
    assert run2.last_message == f"{marker}-TURN-2 done", run2.describe()
    assert_all_answered(rmock)
    [turn2] = posts_with(rmock, TURN2)
    got = turn2.json["input"]
    n, k = len(recall.json["input"]), len(recall.response["output"])
    assert_faithful(got[:n], recall.json["input"], "turn 1 restored: the recall round's input as sent")
    assert_faithful(got[n:n + k], recall.response["output"], "the last round's items as the upstream sent them")
    rest = got[n + k:]
    assert [i.get("type") for i in rest] == ["message"] and TURN2 in mr.message_text(rest[0]), rest
    assert turn2.json["tools"] == stubbed.json["tools"], "the recall tools stay offered, unchanged"


def test_codex_with_a_small_output_goes_through_unchanged(rmock, rproxy, dirs):
    home, work = dirs
    nonce = secrets.token_hex(8)
    small = work / "small.txt"
    small.write_text(f"small {nonce}\n" + "".join(f"row {i}\n" for i in range(300)))
    script = rmock.script = CodexScript(f"cat {small}", "SMALL")
    run = codex.exec_(f"{TURN1} Show it.", base_url=rproxy.url + "/v1", home=home, cwd=work, extra=EXTRA)
    assert run.returncode == 0, run.describe()
    assert run.last_message == script.final_text and script.final_text.startswith("NOT-STUBBED"), run.describe()
    assert_all_answered(rmock)
    for r in rmock.responses_posts():
        assert not set(mr.tool_names(r.json)) & set(RECALL_TOOLS)
        assert STUB_HEADER.encode() not in r.body
    assert nonce in exec_output(rmock.responses_posts()[-1])["output"]
