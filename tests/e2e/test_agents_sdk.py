"""End-to-end with the OpenAI Agents SDK (PyPI `openai-agents`, pinned in
requirements.txt): an agent whose function tool returns a ~40 KB log runs
through the real `toolstub serve` binary against the mock Responses upstream
(mock_responses.py), with `Runner.run`, `Runner.run_streamed`, and response
chaining (`auto_previous_response_id`, then a turn chained with
`previous_response_id`).

The mock plays the model: it asks for the tool; once the output comes back
(as a stub) it calls tool_result_read on the stub's ref; once the proxy
appended the recall result, it answers with a final text quoting it. The
agent's result must be that text, and the agent must never learn of the
recall call.

What the SDK sends (captured with capture_agents.py): ``model``, ``include:
[]``, ``input`` (the user message without ``type``; output items replayed
with their ids, re-serialized in the SDK's own key order;
``function_call_output`` without an id), ``instructions``, ``tools``
(``{"name", "parameters", "strict": true, "type", "description"}``), no
``prompt_cache_key``, ``store`` only when set; a tool's return value goes out
as ``str()`` of it, with no wrapper.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import agents
import openai
import pytest

import mock_responses as mr
from conftest import API_KEY
from responses_support import (RECALL_TOOLS, STUB_HEADER, check_recall_round, check_stub, stored_original,
                               visible)

MODEL = "gpt-mock-agents"
TOOL_CALL = "call_agents_log_1"
RECALL_ID = "call_agents_recall_1"
TURN1, TURN2 = "AGENTS-TURN-1", "AGENTS-TURN-2"
CREDENTIAL = f"Bearer {API_KEY}"
RUN_TIMEOUT = 60.0

agents.set_tracing_disabled(True)  # no trace export to api.openai.com


def access_log(nonce: str) -> str:
    """~40 KB of access log, the tool's output."""
    lines = [f"access log {nonce}"]
    lines += [f"{i:05d} GET /api/v{i % 3}/resource_{i:04d} 200 {i * 7 % 997}ms" for i in range(1000)]
    text = "\n".join(lines)
    assert 38_000 < len(text) < 45_000, len(text)
    return text


class AgentScript:
    def __init__(self, marker: str):
        self.marker = marker
        self.final_text: str | None = None

    def __call__(self, r: mr.Recorded):
        conv = r.conversation or []
        outputs = {o["call_id"]: o for o in mr.tool_outputs(conv)}
        last = mr.last_tool_outputs(conv)
        texts = mr.user_texts(conv)
        if last and last[-1]["call_id"] == RECALL_ID:
            read = json.loads(last[-1]["output"])
            self.final_text = (f"{self.marker} read={json.dumps(read['content'][:120])} "
                               f"total_chars={read['total_chars']}")
            return [mr.reasoning("I have what I need."), mr.message(self.final_text)]
        if TOOL_CALL in outputs and RECALL_ID not in outputs:
            text = mr.output_text_of(outputs[TOOL_CALL]["output"])
            ref = mr.stub_ref(text) if text.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in mr.tool_names(r.json):
                return [mr.message(f"NOT-STUBBED ({len(text)} characters inline)")]
            return [mr.reasoning("The log was externalized; read its start."),
                    mr.function_call(RECALL_ID, "tool_result_read", {"ref": ref, "offset": 0, "limit": 300})]
        if texts and TURN2 in texts[-1]:
            return [mr.message(f"{self.marker}-TURN-2 over {len(conv)} items")]
        if texts and TURN1 in texts[-1]:
            return [mr.reasoning("I need the log."), mr.function_call(TOOL_CALL, "fetch_log", {"service": "api"})]
        return None


def make_agent(base_url: str, log: str, **settings):
    client = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=30.0,
                                http_client=openai.DefaultAsyncHttpxClient(trust_env=False))
    calls = []

    @agents.function_tool
    def fetch_log(service: str) -> str:
        """The access log of a service."""
        calls.append(service)
        return log

    agent = agents.Agent(name="log-reader", instructions="Answer from the log.",
                         model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
                         tools=[fetch_log], model_settings=agents.ModelSettings(**settings))
    return agent, client, calls


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, RUN_TIMEOUT))


async def closing(client, coro):
    """``coro``, then the client closed, in the same event loop."""
    try:
        return await coro
    finally:
        await client.close()


async def run_plain(agent, prompt, **kw):
    return await agents.Runner.run(agent, prompt, **kw)


async def run_streamed(agent, prompt, kinds: list, **kw):
    result = agents.Runner.run_streamed(agent, prompt, **kw)
    async for ev in result.stream_events():
        if ev.type == "raw_response_event":
            kinds.append(ev.data.to_dict())
        else:
            kinds.append({"type": ev.type, "name": getattr(ev, "name", None)})
    return result


def test_agents_sdk_runs_against_the_mock_directly(rmock):
    """The harness itself, with no proxy: the tool runs, its output reaches
    the mock inline, the agent returns the mock's answer."""
    nonce = secrets.token_hex(6)
    log = access_log(nonce)
    rmock.script = AgentScript("DIRECT")
    agent, client, calls = make_agent(rmock.url + "/v1", log)
    result = run(closing(client, run_plain(agent, f"{TURN1} What is slow?")))
    assert calls == ["api"]
    assert result.final_output == f"NOT-STUBBED ({len(log)} characters inline)"
    second = rmock.responses_posts()[-1]
    [out] = [o for o in mr.tool_outputs(second.json["input"]) if o["call_id"] == TOOL_CALL]
    assert out["output"] == log and list(out) == ["call_id", "output", "type"], list(out)


def check_run(rmock, rproxy, script, log: str, result, tool_name: str | None = "fetch_log"
              ) -> tuple[mr.Recorded, mr.Recorded, mr.Recorded]:
    assert script.final_text is not None, "the mock never got the recall result"
    assert result.final_output == script.final_text
    assert json.dumps(log[:120]) in result.final_output and f"total_chars={len(log)}" in result.final_output
    posts = rmock.responses_posts()
    assert [p.status for p in posts] == [200, 200, 200], [(p.status, p.response) for p in posts]
    first, stubbed, recall = posts
    assert not set(mr.tool_names(first.json)) & set(RECALL_TOOLS), "nothing to recall in the first request"
    [out] = [o for o in mr.tool_outputs(mr.items_of(stubbed.json["input"])) if o["call_id"] == TOOL_CALL]
    ref = check_stub(out["output"], call_id=TOOL_CALL, original=log, tool_name=tool_name)
    assert stored_original(rproxy, ref, CREDENTIAL) == log
    [read] = check_recall_round(stubbed, recall, [RECALL_ID])
    assert read["content"] == log[:300] and read["total_chars"] == len(log)
    # What the agent kept of the run: no recall call anywhere.
    kept = json.dumps([i.to_input_item() for i in result.new_items], default=str)
    assert "tool_result_read" not in kept and RECALL_ID not in kept
    assert result.raw_responses[-1].response_id == stubbed.response["id"], "the response id the agent got is round 1's"
    assert [o.type for o in result.raw_responses[-1].output] == \
        [i["type"] for i in visible(stubbed.response["output"]) + recall.response["output"]]
    return first, stubbed, recall


def test_runner_run_with_a_large_tool_output(rmock, rproxy):
    nonce = secrets.token_hex(6)
    log = access_log(nonce)
    script = rmock.script = AgentScript(f"AGENT-DONE-{nonce}")
    agent, client, calls = make_agent(rproxy.url + "/v1", log)
    result = run(closing(client, run_plain(agent, f"{TURN1} What is slow?")))
    assert calls == ["api"]
    check_run(rmock, rproxy, script, log, result)


def test_runner_run_streamed_with_a_large_tool_output(rmock, rproxy):
    nonce = secrets.token_hex(6)
    log = access_log(nonce)
    script = rmock.script = AgentScript(f"AGENT-STREAM-{nonce}")
    agent, client, calls = make_agent(rproxy.url + "/v1", log)
    events: list = []
    result = run(closing(client, run_streamed(agent, f"{TURN1} What is slow?", events)))
    assert calls == ["api"]
    check_run(rmock, rproxy, script, log, result)
    raw = json.dumps(events)
    assert "tool_result_read" not in raw and RECALL_ID not in raw, "a recall event reached the agent"
    types = [e["type"] for e in events]
    assert types.count("response.created") == 2, "one stream per request the agent made"
    assert types.count("response.completed") == 2
    texts = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert texts == script.final_text


@pytest.mark.parametrize("stream", [False, True])
def test_a_chained_run_across_a_recall_round(rmock, rproxy, stream):
    """auto_previous_response_id: the agent's second request chains from its
    first and carries only the tool output (stubbed); the proxy's recall
    round replays it statelessly. A next turn chained from the id the agent
    got continues from the last round upstream."""
    nonce = secrets.token_hex(6)
    log = access_log(nonce)
    script = rmock.script = AgentScript(f"AGENT-CHAIN-{nonce}")
    agent, client, _ = make_agent(rproxy.url + "/v1", log)
    if stream:
        result = run(closing(client, run_streamed(agent, f"{TURN1} What is slow?", [],
                                                  auto_previous_response_id=True)))
    else:
        result = run(closing(client, run_plain(agent, f"{TURN1} What is slow?", auto_previous_response_id=True)))
    # The call is in the previous response, not in this request: no tool name asserted.
    first, stubbed, recall = check_run(rmock, rproxy, script, log, result, tool_name=None)
    assert stubbed.json["previous_response_id"] == first.response["id"]
    assert [i.get("type") for i in stubbed.json["input"]] == ["function_call_output"]
    assert recall.json["previous_response_id"] == first.response["id"]

    agent, client, _ = make_agent(rproxy.url + "/v1", log)
    turn2 = run(closing(client, run_plain(agent, f"{TURN2} And now?", previous_response_id=result.last_response_id)))
    last = rmock.responses_posts()[-1]
    assert last.status == 200, last.response
    assert last.json["previous_response_id"] == recall.response["id"], "chain from the last round upstream"
    want = len(recall.conversation) + len(recall.response["output"]) + 1
    assert turn2.final_output == f"{script.marker}-TURN-2 over {want} items"
