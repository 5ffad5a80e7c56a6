"""End to end with the real Gemini CLI (headless `gemini -p ... --yolo`),
through the real `toolstub serve` binary, against the mock Gemini upstream
(which refuses what the real API refuses: roles out of turn, a function
call left unanswered, a signature lost).

The mock plays the model, deciding each answer from the request's content:
turn 1 asks Gemini CLI to run a shell command with a large output; once the
functionResponse comes back (as a stub), it calls tool_result_read on the
stub's ref; once the proxy appended the recall result, it answers with a
final text quoting it and a second, small command. Gemini CLI must print
that text and never learn of the recall call; the small command's request
(the next turn) must carry the hidden exchange restored. A second test does
the same through `toolstub wrap -- gemini`.

The next turn is the next request of one run, not a second run with
`--resume`: Gemini CLI 0.61.0 resumes a session with a tool call by sending
its functionResponse twice (google-gemini/gemini-cli#29365), which the real
API refuses with or without toolstub.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

import gemini_cli
import mock_gemini as mg
from anthropic_support import RECALL_TOOLS, STUB_HEADER, check_stub, ordered
from conftest import toolstub_bin
from test_wrap import describe, summary, wrap
from gemini_support import check_recall_round, check_recall_tools, recall_tool, stored

TURN1 = "E2E-TURN-1"
RECALLING = "Let me read the stored output."
SIG_A, SIG_B, SIG_C = "c2lnLWUyZS1yb3VuZC1h", "c2lnLWUyZS1yb3VuZC1i", "c2lnLWUyZS1yb3VuZC1j"
SHELL = "run_shell_command"


def build_log(nonce: str) -> str:
    """~25 KB of command output: over toolstub's 20,000, under Gemini CLI's own 40,000 cut."""
    lines = [f"build {nonce} started"]
    lines += [f"line {i:05d} INFO compiling unit {i} of the e2e build: ok" for i in range(440)]
    text = "\n".join(lines) + "\n"
    assert 23_000 < len(text) < 27_000, len(text)
    return text


def streamed_parts(resp: dict) -> list[dict]:
    """A response's parts as the mock streams them, one event's parts after another."""
    return [p for e in mg.sse_events(resp) for p in e["candidates"][0]["content"]["parts"]]


class GeminiCliScript:
    """The mock's model for one Gemini CLI run: the large shell command, the
    recall of its stub, then (with the recall result in hand) a second,
    small command, whose request is the next turn the restoration is for."""

    def __init__(self, command: str, next_command: str, next_marker: str, marker: str):
        self.command, self.next_command, self.next_marker, self.marker = command, next_command, next_marker, marker
        self.round_b: dict | None = None
        self.round_c: dict | None = None
        self.final_text: str | None = None

    def __call__(self, r: mg.Recorded):
        body = r.json
        if SHELL not in mg.tool_names(body) or TURN1 not in "".join(mg.user_texts(body)):
            return None  # a side call: the default text
        last = mg.last_responses(body)
        if last and last[0].get("name") == "tool_result_read":
            read = json.loads(mg.output_text(last[0]))
            self.final_text = (f"{self.marker} read={json.dumps(read.get('content', '')[:120])} "
                               f"total_chars={read.get('total_chars')}")
            self.round_c = mg.response([mg.text(self.final_text),
                                        mg.call(SHELL, {"command": self.next_command}, signature=SIG_C)],
                                       response_id="resp_e2e_c")
            return self.round_c
        if last and last[0].get("name") == SHELL:
            output = mg.output_text(last[0])
            if self.next_marker in output:
                return mg.response([mg.text(f"{self.marker}-NEXT done")], response_id="resp_e2e_d")
            ref = mg.stub_ref(output) if output.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in mg.tool_names(body):
                return mg.response([mg.text(f"NOT-STUBBED ({len(output)} characters inline)")])
            # As the Gemini API does: no call id (the CLI makes one up), the
            # signature on the first call.
            self.round_b = mg.response(
                [mg.text(RECALLING), mg.call("tool_result_read", {"ref": ref, "offset": 0, "limit": 400},
                                             signature=SIG_B)],
                response_id="resp_e2e_b")
            return self.round_b
        if not last:
            return mg.response([mg.call(SHELL, {"command": self.command}, signature=SIG_A)],
                               response_id="resp_e2e_a")
        return None


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def posts_with(gmock, text: str) -> list[mg.Recorded]:
    return [r for r in gmock.generate_posts() if SHELL in mg.tool_names(r.json)
            and any(text in t for t in mg.user_texts(r.json))]


def assert_all_answered(gmock) -> None:
    bad = [(r.method, r.path, r.status, r.body[:200]) for r in gmock.requests() if r.status != 200]
    assert not bad, f"requests the mock did not answer with 200: {bad}"


def test_gemini_cli_runs_against_the_mock_directly(gmock, dirs):
    """The harness itself, with no proxy: Gemini CLI's requests pass the
    mock's checks and the scripted shell round trip completes."""
    home, work = dirs
    gmock.strict_roles = True
    nonce = secrets.token_hex(8)

    def script(r: mg.Recorded):
        last = mg.last_responses(r.json)
        if last and last[0].get("name") == SHELL:
            return mg.response([mg.text(f"DIRECT-OK {nonce in mg.output_text(last[0])}")])
        if SHELL in mg.tool_names(r.json) and TURN1 in (mg.user_texts(r.json) or [""])[-1]:
            return mg.response([mg.call(SHELL, {"command": f"echo {nonce}"}, signature=SIG_A)])
        return None

    gmock.script = script
    run = gemini_cli.prompt(f"{TURN1} Run it.", base_url=gmock.url, home=home, cwd=work)
    assert run.returncode == 0, run.describe()
    assert "DIRECT-OK True" in run.stdout, run.describe()
    assert_all_answered(gmock)
    [r] = [r for r in gmock.generate_posts() if mg.last_responses(r.json)]
    assert r.header("x-goog-api-key") == gemini_cli.API_KEY
    assert r.action == "streamGenerateContent" and "alt=sse" in r.path, r.path
    assert recall_tool(r.json) is None


def run_session(gmock, proxy, dirs, base_url: str, key: str = gemini_cli.API_KEY, run_one=None,
                restoring: bool = True):
    """One Gemini CLI run through ``base_url``: the large shell output as a
    stub, the hidden recall round, and the next turn (the small command's
    request) with the hidden exchange restored (``restoring``: the proxy
    runs with `recall.restore_history` on) or as the CLI kept it."""
    home, work = dirs
    gmock.strict_roles = gmock.require_signatures = True
    nonce = secrets.token_hex(8)
    log = work / "build.log"
    log.write_text(build_log(nonce))
    marker = f"E2E-DONE-{secrets.token_hex(4)}"
    next_marker = f"E2E-NEXT-{secrets.token_hex(4)}"
    script = gmock.script = GeminiCliScript(f"cat {log}", f"echo {next_marker}", next_marker, marker)
    run_one = run_one or (lambda text: gemini_cli.prompt(text, base_url=base_url, home=home, cwd=work))

    run = run_one(f"{TURN1} Look at the build log, please.")
    assert run.returncode == 0, run.describe()
    assert "NOT-STUBBED" not in run.stdout, "the functionResponse reached the mock inline:\n" + run.describe()
    assert marker in run.stdout and nonce in run.stdout, run.describe()
    assert f"{marker}-NEXT done" in run.stdout, run.describe()
    assert "tool_result_read" not in run.stdout + run.stderr, run.describe()
    assert script.round_b is not None and script.round_c is not None
    assert_all_answered(gmock)

    turn = posts_with(gmock, TURN1)
    assert len(turn) == 4, [len(r.json["contents"]) for r in turn]
    round_a, round_b, round_c, round_d = turn
    assert not mg.last_responses(round_a.json) and recall_tool(round_a.json) is None, "nothing to recall in round A"
    assert mg.last_responses(round_b.json)[0]["name"] == SHELL
    assert mg.last_responses(round_c.json)[0]["name"] == "tool_result_read"
    for r in turn:
        assert r.header("x-goog-api-key") == key, "the client's key reaches the upstream"
        assert r.action == "streamGenerateContent" and "alt=sse" in r.path, r.path

    # Round B: the shell output arrived as a stub in response.output; the
    # model's call before it (with its signature) as the CLI sent it.
    [answer] = mg.last_responses(round_b.json)
    assert list(answer["response"]) == ["output"], answer
    stub = answer["response"]["output"]
    assert stub.startswith(STUB_HEADER + "\n"), stub[:300]
    ref = mg.stub_ref(stub)
    original = stored(proxy, ref, key)
    assert nonce in original and original.count("\n") > 400
    check_stub(stub, call_id=answer["id"], original=original, tool_name=SHELL)
    model_a = round_b.json["contents"][-2]
    assert model_a["parts"][0]["thoughtSignature"] == SIG_A, model_a
    assert model_a["parts"][0]["functionCall"]["id"] == answer["id"], (model_a, answer)
    check_recall_tools(round_b.json, round_a.json["tools"])

    # Round C: round B's body plus the hidden exchange.
    [result] = check_recall_round(round_b, round_c, streamed_parts(script.round_b), [None])
    assert result["content"] == original[:400] and result["total_chars"] == len(original)
    assert f"total_chars={len(original)}" in run.stdout

    # Gemini CLI never saw the recall call: its session holds the merged
    # answer and nothing of tool_result_read.
    sessions = "\n".join(p.read_text(errors="replace") for p in sorted((home / ".gemini").rglob("*.json*"))
                         if "chats" in p.parts)
    assert RECALLING in sessions and marker in sessions, sorted(str(p) for p in (home / ".gemini").rglob("*"))
    assert "tool_result_read" not in sessions and SIG_B not in sessions

    # Round D, the next turn: the stub unchanged (prompt cache), then the
    # hidden exchange restored in place of the merged content the CLI saw,
    # then the small command's output inline.
    cs = round_d.json["contents"]
    n = len(round_b.json["contents"])
    assert ordered(cs[:n]) == ordered(round_b.json["contents"]), "the bytes already sent, sent again unchanged"
    check_recall_tools(round_d.json, round_a.json["tools"])
    if not restoring:
        # The merged content as the CLI kept it (every round's text, round
        # C's call with its signature), then the small command's output; no
        # recall call or result.
        merged = cs[n]
        assert merged["role"] == "model", merged
        texts = "".join(p.get("text", "") for p in merged["parts"])
        assert RECALLING in texts and marker in texts, merged
        assert "tool_result_read" not in json.dumps(cs[n:]), cs[n:]
        [small] = [p["functionResponse"] for p in cs[n + 1]["parts"]]
        assert small["name"] == SHELL and next_marker in mg.output_text(small)
        assert len(cs) == n + 2, [c["role"] for c in cs[n:]]
        return
    assert ordered(cs[n:n + 2]) == ordered(round_c.json["contents"][-2:]), \
        "round B's model content (with the recall call) and the recall result restored as sent"
    restored = cs[n + 2]
    assert restored["role"] == "model"
    assert ordered(restored["parts"]) == ordered(streamed_parts(script.round_c)), "round C restored as sent"
    [small] = [p["functionResponse"] for p in cs[n + 3]["parts"]]
    assert small["name"] == SHELL and next_marker in mg.output_text(small)
    assert len(cs) == n + 4, [c["role"] for c in cs[n:]]


def test_gemini_cli_shell_output_is_stubbed_recalled_and_restored(gmock, gproxy, dirs):
    run_session(gmock, gproxy, dirs, gproxy.url)


def test_gemini_cli_through_toolstub_wrap(gmock, dirs, tmp_path):
    """`toolstub wrap -- gemini ...` starts its own proxy and points Gemini
    CLI at it through GOOGLE_GEMINI_BASE_URL; the one the environment had
    (the mock, as a user's might name a gateway) becomes the upstream; the
    CLI's settings are left as they were."""
    home, work = dirs
    log, db = tmp_path / "wrap.log", tmp_path / "wrap.db"
    settings = home / ".gemini" / "settings.json"
    summaries = []

    def run_one(text: str) -> gemini_cli.Run:
        env = gemini_cli.env_for(home, gmock.url)
        before = settings.read_text()
        args = ["-m", gemini_cli.MODEL, "-p", text, "--yolo"]
        p = wrap(["--db", str(db), "--log-file", str(log)], gemini_cli.command(args), env=env, cwd=work)
        assert settings.read_text() == before, "wrap writes nothing to ~/.gemini"
        if p.returncode == 0:
            summaries.append(summary(p.stderr))
        return gemini_cli.Run(args=args, returncode=p.returncode, stdout=p.stdout, stderr=describe(p, log))

    class WrapProxy:
        binary = toolstub_bin()

    WrapProxy.db = db
    run_session(gmock, WrapProxy, dirs, gmock.url, run_one=run_one, restoring=False)
    assert "/wrap/gemini/v1beta/models/" in log.read_text(), "the CLI reached the mock through wrap's route"
    [(requests, externalized, saved, recalls)] = summaries
    assert requests == len(gmock.requests()) - 1, "the recall round is the proxy's own request, not the client's"
    # The ledger counts per request: rounds B and D each carried the stub.
    assert externalized == 2 and recalls == 1 and saved > 2 * 20_000, summaries
