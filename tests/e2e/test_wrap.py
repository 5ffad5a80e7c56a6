"""End-to-end: `toolstub wrap -- claude ...` and `toolstub wrap -- codex ...`
with the real CLIs, against the mock upstreams. wrap starts its own proxy
(no `toolstub serve` here) and points the CLI at it: Claude Code through
ANTHROPIC_BASE_URL, Codex through the provider options wrap adds.

Claude Code keeps ANTHROPIC_BASE_URL pointed at the mock, as a user's
environment might name a gateway: wrap takes it as the Anthropic upstream
instead of overwriting it. Codex gets `--upstream`. Both runs go through
the scripted rounds of test_claude_code.py / test_codex.py: a large tool
output arrives upstream as a stub, the mock's model reads it back with
tool_result_read (answered inside the proxy), the CLI prints the final
text, and wrap's summary counts what happened.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from pathlib import Path

import pytest

import claude_code
import codex
import mock_anthropic as ma
import mock_responses as mr
from conftest import toolstub_bin
from test_claude_code import TOOL_ID as CLAUDE_TOOL_ID
from test_claude_code import TURN1 as CLAUDE_TURN1
from test_claude_code import ClaudeCodeScript, routes_json
from test_codex import EXTRA as CODEX_EXTRA
from test_codex import TOOL_ID as CODEX_TOOL_ID
from test_codex import TURN1 as CODEX_TURN1
from test_codex import CodexScript
from test_codex import routes_json as codex_routes_json

STUB_HEADER = "[toolstub: tool output externalized]"
SUMMARY = re.compile(r"^toolstub: (\d+) requests?, (\d+) tool outputs? externalized, ([\d,]+) characters? "
                     r"\(([\d,]+) tokens?\) saved, (\d+) recall calls? answered$", re.M)
WRAP_TIMEOUT = 150.0


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def wrap(wrap_args: list[str], command: list[str], *, env: dict[str, str], cwd: Path,
         timeout: float = WRAP_TIMEOUT) -> subprocess.CompletedProcess:
    binary = toolstub_bin()
    if not binary.is_file():
        pytest.fail(f"no toolstub binary at {binary}: run scripts/e2e, or set TOOLSTUB_BIN")
    return subprocess.run([str(binary), "wrap", *wrap_args, "--", *command], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def describe(p: subprocess.CompletedProcess, log: Path | None = None) -> str:
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else "(no log)"
    return (f"exit {p.returncode}\n--- stdout ---\n{p.stdout[-4000:]}\n--- stderr ---\n{p.stderr[-4000:]}"
            f"\n--- proxy log ---\n{tail}")


def summary(stderr: str) -> tuple[int, int, int, int]:
    found = SUMMARY.findall(stderr)
    assert len(found) == 1, f"one summary line expected in:\n{stderr}"
    requests, externalized, saved, tokens, recalls = found[0]
    # wrap's own proxy drains its ledger before the summary: an output
    # saved characters, so it saved tokens too.
    assert int(tokens.replace(",", "")) > int(saved.replace(",", "")) // 10, stderr
    return int(requests), int(externalized), int(saved.replace(",", "")), int(recalls)


def test_claude_code_through_wrap(amock, dirs, tmp_path):
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    marker = f"E2E-WRAP-CLAUDE-{secrets.token_hex(4)}"
    script = amock.script = ClaudeCodeScript("Read", {"file_path": str(target)}, marker)
    # The environment names the mock as Claude Code's endpoint: wrap keeps it as the upstream.
    env = claude_code.env_for(amock.url, home)
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"
    p = wrap(["--db", str(db), "--log-file", str(log)],
             [str(claude_code.CLAUDE), "-p", f"{CLAUDE_TURN1} Read {target}.", "--allowedTools", "Read,Bash"],
             env=env, cwd=work)
    assert p.returncode == 0, describe(p, log)
    assert script.final_text is not None and marker in p.stdout, describe(p, log)
    assert nonce in script.final_text, "the recall result reached the final round"
    assert "tool_result_read" not in p.stdout

    # Upstream, through the proxy: the Read result as a stub, the recall tools offered.
    stubbed = [r for r in amock.messages_posts()
               if any(b.get("tool_use_id") == CLAUDE_TOOL_ID and ma.tool_result_text(b).startswith(STUB_HEADER)
                      for b in ma.last_tool_results(r.json))]
    assert stubbed, f"no stubbed tool_result upstream:\n{describe(p, log)}"
    assert "tool_result_read" in ma.tool_names(stubbed[0].json)
    [stub] = [ma.tool_result_text(b) for b in ma.last_tool_results(stubbed[0].json)
              if b.get("tool_use_id") == CLAUDE_TOOL_ID]
    assert len(stub) < len(target.read_text()) // 4, f"the original went upstream ({len(stub)} characters)"
    assert all(r.path.startswith("/v1/messages") for r in amock.messages_posts()), \
        [r.path for r in amock.messages_posts()]
    assert all(r.header("x-api-key") == claude_code.API_KEY for r in amock.messages_posts())
    # The child reached the mock through wrap's route for its own ANTHROPIC_BASE_URL.
    assert "/wrap/anthropic/v1/messages" in log.read_text(), describe(p, log)

    requests, externalized, saved, recalls = summary(p.stderr)
    # The recall round is the proxy's own request upstream, not one of the client's.
    assert requests == len(amock.requests()) - 1, (requests, [r.path for r in amock.requests()])
    assert externalized == 1 and recalls == 1, p.stderr
    assert saved > 30_000, p.stderr
    assert f"originals kept in {db}" in p.stderr


def test_codex_through_wrap(rmock, dirs, tmp_path):
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(codex_routes_json(nonce))
    marker = f"E2E-WRAP-CODEX-{secrets.token_hex(4)}"
    script = rmock.script = CodexScript(f"cat {target}", marker)
    env = codex.env_for(home)
    # wrap's provider reads the key from OPENAI_API_KEY.
    env.pop(codex.KEY_ENV, None)
    env["OPENAI_API_KEY"] = codex.API_KEY
    last = home / "last-message.txt"
    provider = "model_providers.toolstub_wrap"
    command = [str(codex.CODEX), "exec", "--ephemeral", "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox",
               # One attempt per request: a failure shows at once.
               "-c", f"{provider}.request_max_retries=0", "-c", f"{provider}.stream_max_retries=0",
               "-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
               "-c", "feedback.enabled=false", "-c", 'history.persistence="none"',
               "-m", codex.MODEL, "-o", str(last), *CODEX_EXTRA, f"{CODEX_TURN1} Look at {target}."]
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"
    p = wrap(["--upstream", rmock.url, "--db", str(db), "--log-file", str(log)], command, env=env, cwd=work)
    assert p.returncode == 0, describe(p, log)
    final = last.read_text() if last.exists() else None
    assert script.final_text is not None and final == script.final_text, describe(p, log)
    assert nonce in final and "NOT-STUBBED" not in final

    # Every request came over HTTP through the proxy (no WebSocket), with Codex's key.
    assert [(r.method, r.route) for r in rmock.requests()] == [("POST", "/v1/responses")] * len(rmock.requests()), \
        [(r.method, r.path) for r in rmock.requests()]
    assert all(r.header("authorization") == f"Bearer {codex.API_KEY}" for r in rmock.requests())
    # Codex sent the run's secret in a header (its arguments leave it out); it stops at the proxy.
    assert all("x-toolstub-run-secret" not in r.header_names() for r in rmock.requests())
    turn1 = [r for r in rmock.responses_posts() if any(CODEX_TURN1 in t for t in mr.user_texts(r.conversation or []))]
    assert len(turn1) == 3, [len(r.json["input"]) for r in turn1]
    [out] = [o for o in mr.tool_outputs(turn1[1].json["input"]) if o["call_id"] == CODEX_TOOL_ID]
    assert out["output"].startswith(STUB_HEADER + "\n"), out["output"][:200]
    assert "tool_result_read" in mr.tool_names(turn1[1].json)

    requests, externalized, saved, recalls = summary(p.stderr)
    assert requests == len(rmock.requests()) - 1, "the recall round is the proxy's own request, not the client's"
    assert externalized == 1 and recalls == 1, p.stderr
    assert saved > 30_000, p.stderr


@pytest.mark.parametrize("cloud", ["vertex", "foundry", "bedrock"])
def test_claude_code_on_a_cloud_through_wrap(amock, dirs, tmp_path, cloud):
    """Claude Code on Vertex AI or Foundry keeps its cloud through wrap: the
    cloud's base URL in the environment (the mock, as a gateway) becomes the
    upstream, the child's points at the proxy, and the paths and bodies are
    the cloud's."""
    home, work = dirs
    nonce = secrets.token_hex(8)
    target = work / "routes.json"
    target.write_text(routes_json(nonce))
    marker = f"E2E-WRAP-{cloud.upper()}-{secrets.token_hex(4)}"
    script = amock.script = ClaudeCodeScript("Read", {"file_path": str(target)}, marker)
    env = claude_code.env_for(amock.url, home)
    if cloud == "vertex":
        env.update(claude_code.vertex_env(amock.url))
    elif cloud == "foundry":
        env.update(claude_code.foundry_env(amock.url))
    else:
        # wrap's proxy signs with the environment's AWS credentials; the
        # mock checks each signature.
        env.update(claude_code.bedrock_env(amock.url))
        env.update({"AWS_ACCESS_KEY_ID": "AKIDWRAPE2E000000001", "AWS_SECRET_ACCESS_KEY": "wrap/e2e/secret",
                    "AWS_EC2_METADATA_DISABLED": "true",
                    # The mock stands in for AWS: signing goes only to hosts listed.
                    "TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS": '["127.0.0.1"]'})
        amock.aws_credentials = ("AKIDWRAPE2E000000001", "wrap/e2e/secret")
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"
    p = wrap(["--db", str(db), "--log-file", str(log)],
             [str(claude_code.CLAUDE), "-p", f"{CLAUDE_TURN1} Read {target}.", "--allowedTools", "Read,Bash"],
             env=env, cwd=work)
    assert p.returncode == 0, describe(p, log)
    assert script.final_text is not None and marker in p.stdout, describe(p, log)
    posts = amock.messages_posts()
    stubbed = [r for r in posts if any(ma.tool_result_text(b).startswith(STUB_HEADER)
                                       for b in ma.last_tool_results(r.json))]
    assert stubbed, f"no stubbed tool_result upstream:\n{describe(p, log)}"
    if cloud == "vertex":
        assert all(r.route.startswith("/v1/projects/proj-e2e/locations/us-east5/publishers/anthropic/models/")
                   for r in posts), [r.path for r in posts]
        assert "/wrap/vertex/v1/projects/proj-e2e/" in log.read_text(), describe(p, log)
    elif cloud == "foundry":
        assert all(r.route == "/anthropic/v1/messages" for r in posts), [r.path for r in posts]
        assert "/wrap/foundry/anthropic/v1/messages" in log.read_text(), describe(p, log)
    else:
        assert all(r.route.startswith("/model/") and r.route.endswith("/invoke-with-response-stream")
                   for r in posts), [r.path for r in posts]
        assert all(r.header("authorization").startswith("AWS4-HMAC-SHA256 Credential=AKIDWRAPE2E000000001/")
                   for r in posts)
        assert "/wrap/bedrock/model/" in log.read_text(), describe(p, log)
    requests, externalized, saved, recalls = summary(p.stderr)
    assert externalized == 1 and recalls == 1, p.stderr
