"""End-to-end with the real Claude Code CLI (headless `claude -p`), through
the real `toolstub serve` binary, against the mock Anthropic upstream.

The mock plays the model, deciding each answer from the request's content:
turn 1 asks Claude Code to run a tool (Read of a large file, or Bash with a
large output); once the tool_result comes back (as a stub), it calls
tool_result_read on the stub's ref; once the proxy appended the recall
result, it answers with a final text quoting it. Claude Code must print that
text and never learn of the recall call. Turn 2 (`claude -p --continue`)
checks that the hidden exchange is back in the history upstream.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import claude_code
from conftest import start_proxy, stop_proxy, toolstub_bin
import mock_anthropic as ma
from anthropic_support import (RECALL_TOOLS, STUB_HEADER, assert_faithful, binds_thinking, check_recall_round, check_recall_tools,
                               check_stub, ordered, tenant_of, tool_result_blocks)

TOOL_ID = "toolu_01E2eClientTool"
RECALL_ID = "toolu_01E2eRecall"
TURN1 = "E2E-TURN-1"
TURN2 = "E2E-TURN-2"
LOOKING = "Reading it."
RECALLING = "Let me read the stored output."


def routes_json(nonce: str) -> str:
    """~40 KB of pretty-printed JSON, under Read's 2,000 default lines."""
    routes = [f"/api/v{i % 3 + 1}/resource_{i:04d} -> handlers.resource_{i:04d}.{['get', 'put', 'list'][i % 3]}"
              for i in range(700)]
    text = json.dumps({"nonce": nonce, "service": "e2e-routes", "routes": routes}, indent=2)
    assert 38_000 < len(text) < 45_000 and text.count("\n") < 2000, (len(text), text.count("\n"))
    return text


def build_log(nonce: str) -> str:
    """~25 KB of command output: over toolstub's 20,000, under Claude Code's own ~30,000 cut."""
    lines = [f"build {nonce} started"]
    lines += [f"line {i:05d} INFO compiling unit {i} of the e2e build: ok" for i in range(440)]
    text = "\n".join(lines) + "\n"
    assert 23_000 < len(text) < 27_000, len(text)
    return text


class ClaudeCodeScript:
    """The mock's model for one Claude Code test."""

    def __init__(self, tool: str, tool_input: dict, marker: str):
        self.tool, self.tool_input, self.marker = tool, tool_input, marker
        self.round_b: dict | None = None
        self.round_c: dict | None = None
        self.final_text: str | None = None

    def __call__(self, r: ma.Recorded):
        body = r.json
        if self.tool not in ma.tool_names(body):
            return None  # a side call: the default text
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == RECALL_ID:
            read = json.loads(ma.tool_result_text(last[0]))
            self.final_text = (f"{self.marker} read={json.dumps(read.get('content', '')[:160])} "
                               f"total_chars={read.get('total_chars')}")
            self.round_c = ma.message([ma.thinking("I have what I need.", "sig_e2e_round_c"),
                                       ma.text(self.final_text)], id="msg_e2e_round_c")
            return self.round_c
        if last and last[0].get("tool_use_id") == TOOL_ID:
            content = ma.tool_result_text(last[0])
            ref = ma.stub_ref(content) if content.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in ma.tool_names(body):
                return ma.message([ma.text(f"NOT-STUBBED ({len(content)} characters inline)")])
            self.round_b = ma.message(
                [ma.thinking("The output was externalized; read its start.", "sig_e2e_round_b"),
                 ma.text(RECALLING),
                 ma.tool_use(RECALL_ID, "tool_result_read", {"ref": ref, "offset": 0, "limit": 400})],
                "tool_use", id="msg_e2e_round_b")
            return self.round_b
        newest = (ma.user_texts(body) or [""])[-1]
        if TURN2 in newest:
            return ma.message([ma.text(f"{self.marker}-TURN-2 done")], id="msg_e2e_turn_2")
        if TURN1 in newest:
            return ma.message([ma.thinking("I need the tool.", "sig_e2e_round_a"), ma.text(LOOKING),
                               ma.tool_use(TOOL_ID, self.tool, self.tool_input)], "tool_use", id="msg_e2e_round_a")
        return None


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def transcripts(home: Path) -> str:
    """Everything Claude Code keeps of its sessions under HOME."""
    files = sorted((home / ".claude").rglob("*.jsonl"))
    assert files, f"no session transcript under {home / '.claude'}"
    return "\n".join(f.read_text(errors="replace") for f in files)


def posts_with(amock, text: str) -> list[ma.Recorded]:
    return [r for r in amock.messages_posts() if any(text in t for t in ma.user_texts(r.json)[-1:])]


def assert_all_answered(amock) -> None:
    bad = [(r.method, r.path, r.status) for r in amock.requests() if r.status != 200]
    assert not bad, f"requests the mock did not answer with 200: {bad}"


def test_claude_code_runs_against_the_mock_directly(amock, dirs):
    """The harness itself, with no proxy: Claude Code's every request gets a
    valid answer from the mock, and the scripted Read round trip completes."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))

    def script(r: ma.Recorded):
        body = r.json
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == TOOL_ID and "Read" in ma.tool_names(body):
            return ma.message([ma.text(f"DIRECT-OK {len(ma.tool_result_text(last[0]))}")])
        if "Read" in ma.tool_names(body) and TURN1 in (ma.user_texts(body) or [""])[-1]:
            return ma.message([ma.text(LOOKING), ma.tool_use(TOOL_ID, "Read", {"file_path": str(target)})],
                              "tool_use")
        return None

    amock.script = script
    run = claude_code.prompt(f"{TURN1} Read {target}.", base_url=amock.url, home=home, cwd=work)
    assert run.returncode == 0, run.describe()
    [(_, _, block)] = tool_result_blocks(amock.messages_posts()[-1].json)
    inline = ma.tool_result_text(block)
    assert f"DIRECT-OK {len(inline)}" in run.stdout, run.describe()
    assert nonce in inline and not inline.startswith(STUB_HEADER)
    assert_all_answered(amock)


def run_two_turns(amock, aproxy, dirs, tool: str, tool_input: dict, nonce: str, tool_name: str,
                  extra_env: dict[str, str | None] | None = None, key: str | None = claude_code.API_KEY,
                  tenant: str | None = None):
    """Two Claude Code turns: a large output stubbed, a hidden recall round,
    then the next turn with the hidden exchange restored. The proxies of
    this file's own tests run the default (`recall.restore_history` off):
    the exchange comes back all the same, because the round after the
    recall thinks, and a thinking block is bound to the history it was made
    from (on Bedrock too, where Claude Code keeps no thinking block: the
    exchange is restored as it was sent, which the provider has cached)."""
    home, work = dirs
    marker = f"E2E-DONE-{secrets.token_hex(4)}"
    script = amock.script = ClaudeCodeScript(tool, tool_input, marker)

    # Turn 1: tool call, stub, hidden recall round, final text.
    run = claude_code.prompt(f"{TURN1} Look at the output, please.", base_url=aproxy.url, home=home, cwd=work,
                             extra_env=extra_env)
    assert run.returncode == 0, run.describe()
    assert "NOT-STUBBED" not in run.stdout, "the tool_result reached the mock inline:\n" + run.describe()
    assert marker in run.stdout, run.describe()
    assert nonce in run.stdout, "the recall result did not reach the final round:\n" + run.describe()
    assert script.round_b is not None and script.round_c is not None
    assert_all_answered(amock)

    turn1 = posts_with(amock, TURN1)
    [round_b] = [r for r in turn1 if ma.last_tool_results(r.json)
                 and ma.last_tool_results(r.json)[0]["tool_use_id"] == TOOL_ID]
    [round_c] = [r for r in turn1 if ma.last_tool_results(r.json)
                 and ma.last_tool_results(r.json)[0]["tool_use_id"] == RECALL_ID]
    [round_a] = [r for r in turn1 if not ma.last_tool_results(r.json)]
    if binds_thinking(round_a):
        # The recall tools from the first request: the tools never change
        # within a conversation whose model binds its thinking to them.
        assert ma.tool_names(round_a.json)[-3:] == RECALL_TOOLS, ma.tool_names(round_a.json)
    else:
        assert not set(ma.tool_names(round_a.json)) & set(RECALL_TOOLS), "nothing to recall in round A"

    # Round B: the tool output arrived as a stub, every other field as sent.
    [block] = ma.last_tool_results(round_b.json)
    stub = block["content"]
    assert isinstance(stub, str), block
    assert stub.startswith(STUB_HEADER + "\n")
    stored = subprocess.run(
        [str(aproxy.binary), "results", "read", "--db", str(aproxy.db), "--ref", ma.stub_ref(stub),
         "--tenant", tenant or (tenant_of(key) if key else "anonymous"), "--limit", "-1", "--json"],
        capture_output=True, text=True, timeout=20)
    assert stored.returncode == 0, stored.stderr
    original = json.loads(stored.stdout)["content"]
    assert nonce in original
    check_stub(stub, call_id=TOOL_ID, original=original, tool_name=tool_name)
    assert block["cache_control"] == {"type": "ephemeral"}, block
    assert list(block)[:3] == ["tool_use_id", "type", "content"] and list(block)[-1] == "cache_control", list(block)
    names = ma.tool_names(round_b.json)
    client_tools = names[:-len(RECALL_TOOLS)]
    assert tool in client_tools and len(client_tools) >= 5, names
    check_recall_tools(round_b.json["tools"], client_tools)
    before = round_a.json["tools"] if binds_thinking(round_a) else round_a.json["tools"] + round_b.json["tools"][-3:]
    assert ordered(round_b.json["tools"]) == ordered(before), "Claude Code's tools unchanged"

    # Round C: round B's body plus the hidden exchange.
    [result] = check_recall_round(round_b, round_c, script.round_b["content"], [RECALL_ID])
    assert result["content"] == original[:400]
    assert result["total_chars"] == len(original)
    assert f"total_chars={len(original)}" in run.stdout

    # Claude Code never saw the recall call: its transcript holds the merged
    # answer (both rounds' text) and nothing of tool_result_read.
    kept = transcripts(home)
    assert RECALLING in kept and marker in kept
    assert "tool_result_read" not in kept and RECALL_ID not in kept

    # Turn 2: the history upstream has the hidden exchange restored.
    run2 = claude_code.prompt(f"{TURN2} Anything else?", base_url=aproxy.url, home=home, cwd=work, cont=True,
                              extra_env=extra_env)
    assert run2.returncode == 0, run2.describe()
    assert f"{marker}-TURN-2 done" in run2.stdout, run2.describe()
    assert_all_answered(amock)
    [turn2] = posts_with(amock, TURN2)
    msgs = turn2.json["messages"]
    [(i, _, again)] = [(i, j, b) for i, j, b in tool_result_blocks(turn2.json) if b["tool_use_id"] == TOOL_ID]
    assert again["content"] == stub, "turn 2 must carry turn 1's stub unchanged (prompt cache)"
    check_recall_tools(turn2.json["tools"], client_tools)
    assert_faithful(msgs[i + 1], round_c.json["messages"][-2], "round B (with the recall call) restored as sent")
    assert_faithful(msgs[i + 2], round_c.json["messages"][-1], "the recall result restored as sent")
    restored = msgs[i + 3]
    assert restored["role"] == "assistant"
    assert_faithful([b for b in restored["content"] if b["type"] == "text"], [ma.text(script.final_text)],
                    "round C's text restored")
    for b in restored["content"]:
        assert b["type"] in ("text", "thinking"), b
        if b["type"] == "thinking":
            assert_faithful(b, script.round_c["content"][0], "round C's thinking restored")
    assert msgs[i + 4]["role"] == "user" and TURN2 in json.dumps(msgs[i + 4]), msgs[i + 4:]
    assert len(msgs) == i + 5, [m["role"] for m in msgs[i:]]


def test_claude_code_read_of_a_large_file(amock, aproxy, dirs):
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    run_two_turns(amock, aproxy, dirs, "Read", {"file_path": str(target)}, nonce, "Read")


def test_claude_code_bash_with_a_large_output(amock, aproxy, dirs):
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    run_two_turns(amock, aproxy, dirs, "Bash", {"command": f"cat {log}", "description": "Show the build log"},
                  nonce, "Bash")


def test_claude_code_on_vertex_ai(amock, aproxy, dirs):
    """CLAUDE_CODE_USE_VERTEX=1 with ANTHROPIC_VERTEX_BASE_URL at the proxy:
    the same two turns, on Vertex AI's paths and body (the model in the
    path, anthropic_version in the body), kept as Claude Code sent them."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    run_two_turns(amock, aproxy, dirs, "Bash", {"command": f"cat {log}", "description": "Show the build log"},
                  nonce, "Bash", extra_env=claude_code.vertex_env(aproxy.url))
    posts = amock.messages_posts()
    assert posts and all(r.route.startswith("/v1/projects/proj-e2e/locations/us-east5/publishers/anthropic/models/")
                         and r.route.endswith(":streamRawPredict") for r in posts), [r.path for r in posts]
    for r in posts:
        assert "model" not in r.json and r.json["anthropic_version"] == "vertex-2023-10-16", list(r.json)


def test_claude_code_on_microsoft_foundry(amock, aproxy, dirs):
    """CLAUDE_CODE_USE_FOUNDRY=1 with ANTHROPIC_FOUNDRY_BASE_URL at the
    proxy: Anthropic Messages under the resource's path, its key kept.

    On a model whose thinking binds the tools (Claude Code's default on
    Anthropic's API here), the recall tools are offered from the first
    request. On Foundry's default, claude-sonnet-4-5, they join at the
    first stub, and the first-stub gate weighs it:
    test_claude_code_on_foundrys_default_model_keeps_a_first_output_whose_stub_would_cost_more."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    env = claude_code.foundry_env(aproxy.url) | {"ANTHROPIC_MODEL": "claude-opus-5-5"}
    run_two_turns(amock, aproxy, dirs, "Bash", {"command": f"cat {log}", "description": "Show the build log"},
                  nonce, "Bash", extra_env=env, key=env["ANTHROPIC_FOUNDRY_API_KEY"])
    posts = amock.messages_posts()
    assert posts and all(r.route == "/anthropic/v1/messages" for r in posts), [r.path for r in posts]
    keys = {r.header("x-api-key") or r.header("api-key") for r in posts}
    assert keys == {env["ANTHROPIC_FOUNDRY_API_KEY"]}, keys


AWS_KEY, AWS_SECRET = "AKIDTOOLSTUBE2E00001", "e2e/secret/key/for+the/mock/0123456789abcd"


@pytest.fixture
def bproxy(amock, tmp_path):
    """toolstub serve with AWS credentials in its environment, in front of
    the mock, which checks every Bedrock request's SigV4 signature."""
    (tmp_path / "bedrock-proxy").mkdir()
    p = start_proxy(amock.url, tmp_path / "bedrock-proxy", extra_env={
        "AWS_ACCESS_KEY_ID": AWS_KEY, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        # The mock stands in for AWS: signing goes only to hosts listed.
        "TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS": '["127.0.0.1"]'})
    amock.aws_credentials = (AWS_KEY, AWS_SECRET)
    yield p
    stop_proxy(p)


def test_claude_code_on_foundrys_default_model_keeps_a_first_output_whose_stub_would_cost_more(amock, aproxy, dirs):
    """Claude Code sends its tools (48 KB) and system prompt (29 KB) after
    its messages; its provider caches them first. A first stub of a 25 KB
    output makes the provider write all of it again (the recall tools join
    the tools), which 23 KB fewer characters to read do not repay this
    early: the output goes upstream as Claude Code sent it."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    amock.script = ClaudeCodeScript("Bash", {"command": f"cat {log}", "description": "Show the build log"},
                                    f"E2E-DONE-{secrets.token_hex(4)}")
    run = claude_code.prompt(f"{TURN1} Look at the output, please.", base_url=aproxy.url, home=home, cwd=work,
                             extra_env=claude_code.foundry_env(aproxy.url))
    assert run.returncode == 0, run.describe()
    assert "NOT-STUBBED" in run.stdout, run.describe()
    posts = amock.messages_posts()
    assert posts and all(r.json.get("model") == "claude-sonnet-4-5" for r in posts), [r.json.get("model") for r in posts]
    assert all("tool_result_read" not in ma.tool_names(r.json) for r in posts), "no recall tools: no stub"


def test_claude_code_on_amazon_bedrock(amock, bproxy, dirs):
    """CLAUDE_CODE_USE_BEDROCK=1 with ANTHROPIC_BEDROCK_BASE_URL at the proxy
    (the client's own AWS signing skipped): the same two turns on Bedrock's
    invoke paths, the stream in Bedrock's binary frames both ways, every
    request the proxy sends signed with SigV4 by its own credentials."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    run_two_turns(amock, bproxy, dirs, "Bash", {"command": f"cat {log}", "description": "Show the build log"},
                  nonce, "Bash", extra_env=claude_code.bedrock_env(bproxy.url), key=None)
    posts = amock.messages_posts()
    assert posts and all(r.route.startswith("/model/") and r.route.endswith("/invoke-with-response-stream")
                         for r in posts), [r.path for r in posts]
    for r in posts:
        assert "model" not in r.json and r.json["anthropic_version"].startswith("bedrock-"), list(r.json)
        assert r.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY}/")
    assert_all_answered(amock)


HELD_ANTHROPIC_KEY = "sk-ant-held-by-the-proxy-e2e-0042"


def make_client_key(binary: Path, db: Path, name: str) -> tuple[str, str]:
    """``toolstub keys create NAME`` on the store at ``db``: the key (the
    last line) and its tenant."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSTUB_")}
    p = subprocess.run([str(binary), "keys", "create", name, "--db", str(db)],
                       capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    key = p.stdout.strip().splitlines()[-1]
    assert key.startswith("tsk_") and len(key) == 47, p.stdout
    tenant = "k-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    assert tenant in p.stdout, p.stdout
    return key, tenant


@pytest.fixture
def keyed(amock, tmp_path):
    """A toolstub that requires client keys (one made before it starts),
    holding an Anthropic key of its own and AWS credentials, both lent only
    to the mock (listed as their host)."""
    work = tmp_path / "keyed-proxy"
    work.mkdir()
    binary = toolstub_bin()
    key, tenant = make_client_key(binary, work / "toolstub.db", "claude-e2e")
    p = start_proxy(amock.url, work, extra_env={
        "ANTHROPIC_API_KEY": HELD_ANTHROPIC_KEY,
        "TOOLSTUB_UPSTREAM_ANTHROPIC_API_KEY_HOSTS": '["127.0.0.1"]',
        "AWS_ACCESS_KEY_ID": AWS_KEY, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS": '["127.0.0.1"]'})
    amock.aws_credentials = (AWS_KEY, AWS_SECRET)
    yield p, key, tenant
    stop_proxy(p)


def assert_no_client_key_upstream(amock, key: str) -> None:
    for r in amock.requests():
        seen = f"{r.path} {r.headers}"
        assert key not in seen and key[4:] not in seen, seen


def test_a_keyed_proxy_refuses_claude_code_without_a_key(amock, keyed, dirs):
    """Keys exist: a request with only a provider key is refused, in
    Anthropic's error format, and nothing reaches the upstream."""
    proxy, _key, _tenant = keyed
    req = urllib.request.Request(proxy.url + "/v1/messages", method="POST",
                                 data=b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}',
                                 headers={"x-api-key": claude_code.API_KEY, "anthropic-version": "2023-06-01",
                                          "content-type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(req, timeout=10)
    assert refused.value.code == 401
    assert json.loads(refused.value.read())["error"]["type"] == "authentication_error"
    assert amock.requests() == []


def test_claude_code_with_a_client_key_as_its_auth_token(amock, keyed, dirs):
    """ANTHROPIC_AUTH_TOKEN=<client key> and no Anthropic key of its own:
    the proxy admits it by the key, sends its own Anthropic key upstream,
    and files the outputs under the key's tenant."""
    proxy, key, tenant = keyed
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    run_two_turns(amock, proxy, dirs, "Read", {"file_path": str(target)}, nonce, "Read",
                  extra_env={"ANTHROPIC_API_KEY": None, "ANTHROPIC_AUTH_TOKEN": key}, key=None, tenant=tenant)
    posts = amock.messages_posts()
    assert posts and all(r.header("x-api-key") == HELD_ANTHROPIC_KEY for r in posts), \
        [r.header("x-api-key") for r in posts]
    assert all(r.header("authorization") is None for r in posts), [r.header("authorization") for r in posts]
    assert_no_client_key_upstream(amock, key)


def test_claude_code_on_bedrock_with_a_client_key_in_its_custom_headers(amock, keyed, dirs):
    """CLAUDE_CODE_SKIP_BEDROCK_AUTH=1 and the client key in
    ANTHROPIC_CUSTOM_HEADERS: admitted by the key, every request signed by
    the proxy's AWS identity, the key never upstream."""
    proxy, key, tenant = keyed
    home, work = dirs
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    env = {**claude_code.bedrock_env(proxy.url), "ANTHROPIC_CUSTOM_HEADERS": f"x-toolstub-key: {key}"}
    run_two_turns(amock, proxy, dirs, "Bash", {"command": f"cat {log}", "description": "Show the build log"},
                  nonce, "Bash", extra_env=env, key=None, tenant=tenant)
    posts = amock.messages_posts()
    assert posts and all(r.route.endswith("/invoke-with-response-stream") for r in posts), [r.path for r in posts]
    for r in posts:
        assert r.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY}/")
    assert_no_client_key_upstream(amock, key)
    assert_all_answered(amock)


def test_claude_code_with_a_small_output_goes_through_unchanged(amock, aproxy, dirs):
    """Nothing over budget: the tool_result reaches the mock inline and no
    recall tool is offered (on a model that binds its thinking to the
    tools, the recall tools are there from the first request, and nothing
    else changes)."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    small = work / "small.txt"
    small.write_text(f"small {nonce}\n" + "".join(f"row {i}\n" for i in range(300)))

    def script(r: ma.Recorded):
        body = r.json
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == TOOL_ID:
            return ma.message([ma.text(f"SMALL-OK {ma.tool_result_text(last[0]).count(nonce)}")])
        if "Bash" in ma.tool_names(body) and TURN1 in (ma.user_texts(body) or [""])[-1]:
            return ma.message([ma.tool_use(TOOL_ID, "Bash", {"command": f"cat {small}", "description": "cat"})],
                              "tool_use")
        return None

    amock.script = script
    run = claude_code.prompt(f"{TURN1} Show it.", base_url=aproxy.url, home=home, cwd=work)
    assert run.returncode == 0, run.describe()
    assert "SMALL-OK 1" in run.stdout, run.describe()
    for r in amock.messages_posts():
        names = ma.tool_names(r.json)
        if binds_thinking(r) and "Bash" in names:
            assert names[-3:] == RECALL_TOOLS, names
            assert not set(names[:-3]) & set(RECALL_TOOLS)
        else:
            assert not set(names) & set(RECALL_TOOLS)
        assert STUB_HEADER.encode() not in r.body
    assert_all_answered(amock)
