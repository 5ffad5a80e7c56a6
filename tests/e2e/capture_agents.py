"""Capture what the OpenAI Agents SDK and ``client.responses.create`` really
send: each scenario runs against the mock Responses upstream directly (no
proxy in between); every request is written to OUTDIR (one JSON file per
request: method, path, headers with the key masked, body, the response the
mock made), plus a summary.

    .venv/bin/python tests/e2e/capture_agents.py OUTDIR

Scenarios: ``Runner.run`` and ``Runner.run_streamed`` of an agent whose
function tools return a ~40 KB string and a dict; a second turn chained
with ``previous_response_id``; a run with ``auto_previous_response_id``; a
run with ``store=False``; ``client.responses.create`` with and without
``stream``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agents  # noqa: E402
import openai  # noqa: E402

import mock_responses as mr  # noqa: E402

KEY = "sk-agents-capture"


def big_text() -> str:
    return "\n".join(f"{i:05d} GET /api/v{i % 3}/resource_{i:04d} 200 {i * 7 % 997}ms" for i in range(1000))


def script(r: mr.Recorded):
    conv = r.conversation or []
    last = mr.last_tool_outputs(conv)
    if last:
        return [mr.reasoning("Got it."), mr.message(f"DONE after {[o['call_id'] for o in last]}")]
    texts = mr.user_texts(conv)
    if texts and "TOOLS" in texts[-1]:
        return [mr.reasoning("Use both tools."),
                mr.function_call("call_cap_text", "fetch_log", {"service": "api"}),
                mr.function_call("call_cap_dict", "fetch_table", {"rows": 3})]
    return [mr.message("PLAIN")]


def masked(headers):
    return [(k, "<masked>" if k == "authorization" else v) for k, v in headers]


async def main_async(out: Path) -> list[str]:
    mock = mr.start()
    mock.script = script
    notes = []
    client = openai.AsyncOpenAI(base_url=mock.url + "/v1", api_key=KEY, max_retries=0,
                                http_client=openai.DefaultAsyncHttpxClient(trust_env=False))
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def fetch_log(service: str) -> str:
        """The access log of a service."""
        return big_text()

    @agents.function_tool
    def fetch_table(rows: int) -> dict:
        """A small table."""
        return {"columns": ["a", "b"], "rows": [[i, i * i] for i in range(rows)]}

    agent = agents.Agent(name="capture", instructions="You are terse.", model="gpt-mock-1",
                         tools=[fetch_log, fetch_table])
    marks = []

    def mark(name):
        marks.append((name, len(mock.requests())))

    mark("Runner.run")
    res = await agents.Runner.run(agent, "TOOLS please")
    notes.append(f"Runner.run final_output={res.final_output!r} last_response_id={res.last_response_id}")
    mark("Runner.run previous_response_id")
    res2 = await agents.Runner.run(agent, "Second turn", previous_response_id=res.last_response_id)
    notes.append(f"chained final_output={res2.final_output!r}")
    mark("Runner.run_streamed")
    streamed = agents.Runner.run_streamed(agent, "TOOLS please, streamed")
    kinds = []
    async for ev in streamed.stream_events():
        kinds.append(ev.type if ev.type != "raw_response_event" else "raw:" + ev.data.type)
    notes.append(f"run_streamed final_output={streamed.final_output!r} events={sorted(set(kinds))}")
    mark("Runner.run auto_previous_response_id")
    res3 = await agents.Runner.run(agent, "TOOLS auto chain", auto_previous_response_id=True)
    notes.append(f"auto chain final_output={res3.final_output!r}")
    mark("Runner.run store=False")
    agent_nostore = agent.clone(model_settings=agents.ModelSettings(store=False))
    try:
        res4 = await agents.Runner.run(agent_nostore, "TOOLS without store")
        notes.append(f"store=False final_output={res4.final_output!r}")
    except openai.APIStatusError as e:
        notes.append(f"store=False failed: {e.status_code} {e.message}")
    mark("Runner.run store=False include")
    agent_include = agent.clone(model_settings=agents.ModelSettings(
        store=False, response_include=["reasoning.encrypted_content"]))
    res5 = await agents.Runner.run(agent_include, "TOOLS without store, with include")
    notes.append(f"store=False+include final_output={res5.final_output!r}")
    mark("responses.create")
    r1 = await client.responses.create(model="gpt-mock-1", input="PLAIN please")
    notes.append(f"responses.create id={r1.id} output_text={r1.output_text!r}")
    mark("responses.create stream")
    s = await client.responses.create(model="gpt-mock-1", input="PLAIN streamed", stream=True)
    async for _ in s:
        pass
    mark("end")
    await client.close()
    mock.stop()

    summary = []
    reqs = mock.requests()
    for (name, start), (_, end) in zip(marks, marks[1:]):
        summary.append(f"== {name}")
        for i in range(start, end):
            r = reqs[i]
            (out / f"{i:02d}.json").write_text(json.dumps(
                {"scenario": name, "method": r.method, "path": r.path, "status": r.status,
                 "headers": masked(r.headers), "body": r.json, "response": r.response}, indent=1))
            line = f"{i:02d} {r.method} {r.path} -> {r.status} {len(r.body)}B"
            if isinstance(r.json, dict):
                j = r.json
                line += f"\n   keys={list(j)}"
                for k in ("store", "include", "previous_response_id", "prompt_cache_key", "stream", "tool_choice",
                          "parallel_tool_calls", "reasoning", "instructions"):
                    if k in j:
                        line += f"\n   {k}={json.dumps(j[k])[:120]}"
                for t in j.get("tools") or []:
                    line += f"\n   tool {json.dumps(t)[:300]}"
                for item in mr.items_of(j.get("input")):
                    s_ = json.dumps({k: (v if not isinstance(v, str) or len(v) < 120 else f"str({len(v)}): "
                                         + v[:60]) for k, v in item.items()})
                    line += f"\n   item {s_[:400]}"
            summary.append(line)
    return notes + summary


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    lines = asyncio.run(main_async(out))
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
