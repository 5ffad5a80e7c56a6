"""`toolstub estimate` on the session files the real clients write.

The real Claude Code, Codex, opencode and Gemini CLIs (and an OpenAI Agents
SDK agent, whose `to_input_list()` is saved) run headless against
the mock upstreams (no proxy: the mock records exactly what each client
sent) and keep their own session files in their own HOME. `toolstub
estimate` then reads those files: each request it rebuilds must be the
request the mock received (less what the file does not record, which it
names), and its replay must find the large output, externalize it and,
where the model's real answer quotes what only that output held, charge
the recall. With no PATH it must find the files where the clients keep them.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import claude_code
import codex
import gemini_cli
import mock_anthropic as ma
import mock_gemini as mg
import mock_responses as mr
import opencode
from conftest import toolstub_bin

TOOL_ID = "toolu_01E2eEstimateBash"
CALL_ID = "call_e2e_estimate_exec"
TURN1, TURN2 = "E2E-ESTIMATE-TURN-1", "E2E-ESTIMATE-TURN-2"


def build_log(nonce: str) -> str:
    """~25 KB of command output (over toolstub's 20,000, under Claude
    Code's own ~30,000 cut) with one line in its middle that only it holds."""
    lines = [f"line {i:05d} INFO compiling unit {i} of the e2e build: ok" for i in range(440)]
    lines[220] = f"line 00220 WARN cache key {nonce}_key rebuilt from scratch"
    text = "\n".join(lines) + "\n"
    assert 23_000 < len(text) < 27_000, len(text)
    return text


def estimate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSTUB_")}
    p = subprocess.run([str(toolstub_bin()), "estimate", *args], capture_output=True, text=True, timeout=120,
                       env={**base, **(env or {})})
    assert p.returncode == 0, p.stderr
    return p


def report(path: Path | None, env: dict[str, str] | None = None) -> dict:
    out = json.loads(estimate("--json", *([str(path)] if path else []), env=env).stdout)
    print(json.dumps({k: out[k] for k in ("sessions", "saved_fraction")}), json.dumps(out["totals"]))
    return out


def rebuilt(path: Path) -> list[dict]:
    return [json.loads(line) for line in estimate("--print-requests", str(path)).stdout.splitlines()]


def unmarked(value):
    """A body's part without Anthropic ``cache_control`` markers and Gemini
    ``thoughtSignature``s (which no session file keeps)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k not in ("cache_control", "thoughtSignature")}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def own_home(home: Path) -> dict[str, str]:
    """An environment whose user folders are all under ``home``."""
    return {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"), "CLAUDE_CONFIG_DIR": "",
            "CODEX_HOME": "", "GEMINI_CLI_HOME": ""}


def as_read(message: dict) -> dict:
    """A message as the provider reads it: a string content is its one
    text block (Claude Code sends a message either way)."""
    m = dict(message)
    if isinstance(m.get("content"), str):
        m["content"] = [{"type": "text", "text": m["content"]}]
    return m


def test_estimate_reads_a_claude_code_session(amock, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    quote = f"The build rebuilt {nonce}_key at line 00220."

    def script(r: ma.Recorded):
        body = r.json
        if "Bash" not in ma.tool_names(body):
            return None  # a side call: the default text
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == TOOL_ID:
            return ma.message([ma.text(quote)], id="msg_e2e_estimate_2")
        newest = (ma.user_texts(body) or [""])[-1]
        if TURN2 in newest:
            return ma.message([ma.text("Nothing else.")], id="msg_e2e_estimate_3")
        if TURN1 in newest:
            return ma.message([ma.text("Reading the log."),
                               ma.tool_use(TOOL_ID, "Bash", {"command": f"cat {log}", "description": "Show it"})],
                              "tool_use", id="msg_e2e_estimate_1")
        return None

    amock.script = script
    run = claude_code.prompt(f"{TURN1} Show me {log}.", base_url=amock.url, home=home, cwd=work)
    assert run.returncode == 0 and quote in run.stdout, run.describe()
    run = claude_code.prompt(f"{TURN2} Anything else?", base_url=amock.url, home=home, cwd=work, cont=True)
    assert run.returncode == 0 and "Nothing else." in run.stdout, run.describe()
    sent = [r.json for r in amock.messages_posts()]
    projects = home / ".claude" / "projects"
    assert list(projects.rglob("*.jsonl")), "Claude Code wrote no session file"

    # Every request rebuilt as Claude Code sent it.
    requests = rebuilt(projects)
    assert [r["source"] for r in requests] == ["claude_code"] * len(sent)
    assert len(requests) == len(sent) >= 3, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        body = got["body"]
        assert [as_read(m) for m in body["messages"]] == [as_read(m) for m in real["messages"]]
        assert body["tools"] == real["tools"]
        # Claude Code puts a billing line of its own before the recorded system prompt.
        system = [b for b in real["system"] if not b["text"].startswith("x-anthropic-billing-header")]
        assert body["system"] == system
        for key in ("model", "max_tokens", "thinking", "stream"):
            assert body.get(key) == real.get(key), key

    # The replay: the log is externalized and the answer quoting its middle
    # line is charged a recall round.
    out = report(projects)
    assert out["sessions"] == 1 and out["files_skipped"] == []
    [s] = out["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("claude_code", "anthropic", 0)
    assert "not resolved" not in s["name"]
    assert s["requests"] == len(sent)
    assert s["outputs_externalized"] == 1 and s["recall_rounds"] >= 1, s
    assert s["models"][0]["price_model"]["name"] == "anthropic"
    assert s["models"][0]["direct"]["cache_read"] > 0, "Claude Code's breakpoints are read back"
    assert isinstance(out["saved_fraction"], float)


def routes_json(nonce: str) -> str:
    routes = [f"/api/v{i % 3 + 1}/resource_{i:04d} -> handlers.resource_{i:04d}.{['get', 'put', 'list'][i % 3]}"
              for i in range(650)]
    return json.dumps({"nonce": nonce, "service": "e2e-routes", "routes": routes}, indent=2)


def test_estimate_reads_a_codex_rollout(rmock, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    target = work / "routes.json"
    target.write_text(routes_json(secrets.token_hex(8)))

    def script(r: mr.Recorded):
        conv = r.conversation or []
        if any(o["call_id"] == CALL_ID for o in mr.tool_outputs(conv)):
            if TURN2 in (mr.user_texts(conv) or [""])[-1]:
                return [mr.message("Nothing else.", phase="final_answer")]
            return [mr.reasoning("Seen it."), mr.message("It lists 650 routes.", phase="final_answer")]
        if TURN1 in (mr.user_texts(conv) or [""])[-1]:
            return [mr.reasoning("I need to read it."),
                    mr.function_call(CALL_ID, "exec_command",
                                     {"cmd": f"cat {target}", "login": False, "max_output_tokens": 20000})]
        return None

    rmock.script = script
    extra = ["--json", "-c", "tool_output_token_limit=40000"]
    run = codex.exec_(f"{TURN1} Look at {target}.", base_url=rmock.url + "/v1", home=home, cwd=work,
                      ephemeral=False, extra=extra)
    assert run.returncode == 0, run.describe()
    run = codex.exec_(f"{TURN2} And now?", base_url=rmock.url + "/v1", home=home, cwd=work, resume=True,
                      extra=extra)
    assert run.returncode == 0, run.describe()
    sent = [r.json for r in rmock.responses_posts()]
    sessions = home / ".codex" / "sessions"
    assert list(sessions.rglob("rollout-*.jsonl")), "Codex wrote no rollout"

    # Every request rebuilt as Codex sent it (the base instructions first,
    # as the rollout records them; Codex may send a shorter variant).
    requests = rebuilt(sessions)
    assert len(requests) == len(sent) >= 3, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        items, real_items = got["body"]["input"], real["input"]
        assert len(items) == len(real_items)
        assert (items[0]["type"], items[0]["role"]) == (real_items[0]["type"], real_items[0]["role"]) == (
            "message", "developer")
        assert items[1:] == real_items[1:]
        assert got["body"]["model"] == real["model"] == codex.MODEL

    out = report(sessions)
    assert out["sessions"] == 1
    [s] = out["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("codex", "responses", 0)
    assert s["requests"] == len(sent)
    assert s["outputs_externalized"] == 1, s
    assert s["models"][0]["price_model"]["name"] == "openai"
    # Sent again on every later request, the ~40 KB output costs less as a stub.
    assert s["input_tokens"]["toolstub"] < s["input_tokens"]["direct"], s


OPENCODE_CALL = "toolu_01E2eEstimateOpencode"


def test_estimate_reads_an_opencode_session(amock, tmp_path):
    """opencode 1.x keeps its sessions in a SQLite database; `opencode run
    --format json` prints its events. Both are read."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    nonce = secrets.token_hex(8)
    (work / "build.log").write_text(build_log(nonce))
    quote = f"The build rebuilt {nonce}_key at line 00220."

    def script(r: ma.Recorded):
        body = r.json
        if "bash" not in ma.tool_names(body):
            return None  # the title call: the default text
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == OPENCODE_CALL:
            return ma.message([ma.text(quote)], id="msg_e2e_oc_2")
        newest = (ma.user_texts(body) or [""])[-1]
        if TURN2 in newest:
            return ma.message([ma.text("Nothing else.")], id="msg_e2e_oc_3")
        if TURN1 in newest:
            return ma.message([ma.text("Reading the log."),
                               ma.tool_use(OPENCODE_CALL, "bash", {"command": "cat build.log",
                                                                   "description": "Show the log"})],
                              "tool_use", id="msg_e2e_oc_1")
        return None

    amock.script = script
    env = opencode.env_for(home)
    env["OPENCODE_CONFIG_CONTENT"] = json.dumps({"provider": {"anthropic": {"options": {"baseURL": amock.url + "/v1"}}}})

    def run(text: str, *extra: str, cont: bool = False) -> subprocess.CompletedProcess:
        args = opencode.command(text, cwd=work, cont=cont)
        args = [*args[:-1], *extra, args[-1]]
        p = subprocess.run(args, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=opencode.RUN_TIMEOUT)
        assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
        return p

    events = run(f"{TURN1} Look at the build log, please.", "--format", "json").stdout
    assert quote in events, events[-2000:]
    assert "Nothing else." in run(f"{TURN2} Anything else?", cont=True).stdout
    sent = [r.json for r in amock.messages_posts() if "bash" in ma.tool_names(r.json)]
    db = home / ".local" / "share" / "opencode" / "opencode.db"
    assert db.is_file(), sorted(str(p) for p in home.rglob("*"))

    # Every request of the agent rebuilt as opencode sent it, but for the
    # system prompt and tools, which the database does not hold.
    requests = rebuilt(db)
    assert len(requests) == len(sent) == 3, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        assert (got["source"], got["shape"]) == ("opencode", "anthropic")
        assert got["body"]["model"] == real["model"]
        assert unmarked(got["body"]["messages"]) == unmarked(real["messages"])
        assert "system" not in got["body"] and got["body"]["tools"] == []
        assert [p[0] for p in got["placeholders"]] == ["opencode-tools", "opencode-system"]
        assert any(a.startswith("tools and system prompt: placeholders") for a in got["assumed"])
        # Where opencode puts its markers: the newest two messages.
        marked = [i for i, m in enumerate(real["messages"]) if "cache_control" in json.dumps(m)]
        got_marked = [i for i, m in enumerate(got["body"]["messages"]) if "cache_control" in json.dumps(m)]
        assert got_marked == marked, (got_marked, marked)

    out = report(db)
    assert out["sessions"] == 1 and out["files_skipped"] == []
    [s] = out["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("opencode", "anthropic", 0)
    assert s["requests"] == 3 and s["outputs_externalized"] == 1, s
    assert s["recall_rounds"] >= 1, "the answer quotes the log's middle line"
    assert s["models"][0]["price_model"]["name"] == "anthropic"

    # The events of `opencode run --format json`: run 1's two requests, the
    # prompt stood in for.
    log = tmp_path / "run.jsonl"
    log.write_text(events)
    got = rebuilt(log)
    assert [r["index"] for r in got] == [0, 1]
    assert got[1]["body"]["messages"][0]["content"] == "(the prompt of this run: not in the log)"
    tool = [m for m in got[1]["body"]["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and f"{nonce}_key" in tool[0]["content"]
    [s] = report(log)["per_session"]
    assert (s["source"], s["outputs_externalized"]) == ("opencode", 1), s

    # No PATH: opencode's own folder, under XDG_DATA_HOME.
    found = report(None, env=own_home(home))
    assert [s["source"] for s in found["per_session"]] == ["opencode"], found["per_session"]
    assert found["per_session"][0]["name"].startswith(str(db))


def test_estimate_reads_a_gemini_cli_session(gmock, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    quote = f"The build rebuilt {nonce}_key at line 00220."
    shell = "run_shell_command"

    def script(r: mg.Recorded):
        last = mg.last_responses(r.json)
        if last and last[0].get("name") == shell:
            return mg.response([mg.text(quote)])
        if shell in mg.tool_names(r.json) and TURN1 in (mg.user_texts(r.json) or [""])[-1]:
            return mg.response([mg.text("Reading the log."),
                                mg.call(shell, {"command": f"cat {log}"}, signature="c2lnLWUyZS1lc3RpbWF0ZQ")])
        return None

    gmock.script = script
    run = gemini_cli.prompt(f"{TURN1} Look at the build log, please.", base_url=gmock.url, home=home, cwd=work)
    assert run.returncode == 0 and quote in run.stdout, run.describe()
    sent = [r.json for r in gmock.generate_posts() if shell in mg.tool_names(r.json)]
    chats = sorted(home.glob(".gemini/tmp/*/chats"))
    assert chats and list(chats[0].glob("session-*")), sorted(str(p) for p in home.rglob("*"))

    requests = rebuilt(home / ".gemini")
    assert len(requests) == len(sent) == 2, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        assert (got["source"], got["shape"], got["model"]) == ("gemini_cli", "gemini", gemini_cli.MODEL)
        assert unmarked(got["body"]["contents"]) == unmarked(real["contents"])
        assert [p[0] for p in got["placeholders"]] == ["gemini-cli-tools", "gemini-cli-system"]

    out = report(chats[0])
    assert out["sessions"] == 1 and out["files_skipped"] == []
    [s] = out["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("gemini_cli", "gemini", 0)
    assert s["requests"] == 2 and s["outputs_externalized"] == 1, s
    assert s["recall_rounds"] == 1, "the answer quotes the log's middle line"
    assert s["models"][0]["price_model"]["name"] == "openai"

    # No PATH: Gemini CLI's chats under HOME, its settings not read.
    found = report(None, env=own_home(home))
    assert [s["source"] for s in found["per_session"]] == ["gemini_cli"]
    assert found["files_skipped"] == []


def test_estimate_reads_an_agents_sdk_input_list(rmock, tmp_path):
    """The OpenAI Agents SDK's `result.to_input_list()`, saved as JSON as an
    agent would keep its history, is read as the Responses requests the SDK
    sent (their input items; the list holds no instructions or tools)."""
    import test_agents_sdk as ta

    nonce = secrets.token_hex(6)
    log = ta.access_log(nonce)
    rmock.script = ta.AgentScript("DIRECT")
    agent, client, calls = ta.make_agent(rmock.url + "/v1", log)

    async def two_turns():
        first = await ta.agents.Runner.run(agent, f"{ta.TURN1} What is slow?")
        return await ta.agents.Runner.run(agent, first.to_input_list() + [
            {"role": "user", "content": f"{ta.TURN2} And now?"}])

    result = ta.run(ta.closing(client, two_turns()))
    assert calls == ["api"]
    sent = [r.json for r in rmock.responses_posts()]
    saved = tmp_path / "history.json"
    saved.write_text(json.dumps(result.to_input_list()))

    requests = rebuilt(saved)
    assert len(requests) == len(sent) == 3, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        assert (got["source"], got["shape"]) == ("responses_items", "responses")
        assert got["body"]["input"] == real["input"]
        assert [t["name"] for t in got["body"]["tools"]] == ["fetch_log"]
        assert any(a.startswith("tools: 1 definitions made from the calls") for a in got["assumed"])

    out = report(saved)
    [s] = out["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("responses_items", "responses", 0)
    assert s["requests"] == 3 and s["outputs_externalized"] == 1, s
    assert s["input_tokens"]["toolstub"] < s["input_tokens"]["direct"], s


def test_estimate_reads_a_claude_code_stream_json_log(amock, tmp_path):
    """`claude -p --output-format stream-json --verbose`, as CI keeps it:
    its events are read as the requests Claude Code sent: the model's turns
    and the tool results as sent; the opening user message (the prompt and
    the context Claude Code adds to it), which the log does not hold, stood
    in for; system prompt and tools counted as placeholders."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    quote = f"The build rebuilt {nonce}_key at line 00220."

    def script(r: ma.Recorded):
        body = r.json
        if "Bash" not in ma.tool_names(body):
            return None
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == TOOL_ID:
            return ma.message([ma.text(quote)], id="msg_e2e_stream_2")
        if TURN1 in (ma.user_texts(body) or [""])[-1]:
            return ma.message([ma.text("Reading the log."),
                               ma.tool_use(TOOL_ID, "Bash", {"command": f"cat {log}", "description": "Show it"})],
                              "tool_use", id="msg_e2e_stream_1")
        return None

    amock.script = script
    run = claude_code.run(["-p", f"{TURN1} Show me {log}.", "--allowedTools", "Bash", "--output-format",
                           "stream-json", "--verbose"], base_url=amock.url, home=home, cwd=work)
    assert run.returncode == 0 and quote in run.stdout, run.describe()
    sent = [r.json for r in amock.messages_posts() if "Bash" in ma.tool_names(r.json)]
    events = tmp_path / "run.jsonl"
    events.write_text(run.stdout)

    requests = rebuilt(events)
    assert len(requests) == len(sent) == 2, (len(requests), len(sent))
    for got, real in zip(requests, sent):
        assert (got["source"], got["shape"]) == ("claude_code_stream", "anthropic")
        assert got["body"]["model"] == real["model"]
        msgs = [as_read(m) for m in unmarked(got["body"]["messages"])]
        assert msgs[0]["content"][0]["text"] == "(the prompt of this run: not in the log)"

        def turns(messages):
            return [m for m in messages if m["role"] == "assistant"
                    or any(b.get("type") == "tool_result" for b in m["content"])]

        assert turns(msgs) == turns([as_read(m) for m in unmarked(real["messages"])])

    [s] = report(events)["per_session"]
    assert (s["source"], s["shape"], s["unreadable"]) == ("claude_code_stream", "anthropic", 0)
    assert s["requests"] == 2 and s["outputs_externalized"] == 1 and s["recall_rounds"] == 1, s
