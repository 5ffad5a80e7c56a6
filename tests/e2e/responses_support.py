"""What the Responses e2e tests share: the contract's constants, and the checks
of a rewritten request, of a recall round as the upstream saw it, and of the
one response (or stream) the client got."""

from __future__ import annotations

import json
import subprocess

import mock_responses as mr
from anthropic_support import (RECALL_TOOLS, STUB_HEADER, THRESHOLD, assert_faithful, check_stub,  # noqa: F401
                               expected_ref, ordered, ref_of, sha16, tenant_of)

# The recall tools in the flat Responses shape, keys in this order.
RECALL_TOOL_KEYS = ["type", "name", "description", "parameters", "strict"]
TERMINAL = ("response.completed", "response.failed", "response.incomplete")
ITEM_CALLS = ("function_call", "custom_tool_call")


def is_recall(item: dict) -> bool:
    return item.get("type") == "function_call" and item.get("name") in RECALL_TOOLS


def visible(output: list[dict]) -> list[dict]:
    """A round's output as the client may see it: without recall calls."""
    return [i for i in output if not is_recall(i)]


def replayed(output: list[dict]) -> list[dict]:
    """A recall round's output as the next round carries it: reasoning,
    messages and the recall calls; the client's calls of that round dropped."""
    return [i for i in output if i.get("type") not in ITEM_CALLS or is_recall(i)]


def check_recall_tools(tools: list[dict], client_tools: list[dict]) -> None:
    """The client's tools first, unchanged (key order included), then the three
    recall tools in the flat function shape."""
    assert ordered(tools[:len(client_tools)]) == ordered(client_tools), "the client's tools must stay as sent"
    extra = tools[len(client_tools):]
    assert [t.get("name") for t in extra] == RECALL_TOOLS, [t.get("name") for t in tools]
    for tool in extra:
        assert list(tool) == RECALL_TOOL_KEYS, tool
        assert tool["type"] == "function" and tool["strict"] is False, tool
        assert isinstance(tool["description"], str) and tool["description"], tool
        assert tool["parameters"]["type"] == "object", tool
    read = extra[0]["parameters"]
    assert {"ref", "offset", "limit"} <= set(read["properties"]), read
    assert "ref" in read.get("required", []), read


def input_list(body: dict) -> list:
    assert isinstance(body.get("input"), list), f"input is not a list of items: {str(body.get('input'))[:200]}"
    return body["input"]


def check_recall_round(first: mr.Recorded, second: mr.Recorded, recall_ids: list[str]) -> list[dict]:
    """Round 2 upstream is round 1's body with ``input`` extended by round 1's
    output items (reasoning, messages, recall calls; byte-faithful; client
    calls dropped) and one function_call_output per recall call, in order.
    Returns the parsed recall results."""
    r1, r2 = first.json, second.json
    assert second.header("content-length") == str(len(second.body))
    in1, in2 = input_list(r1), input_list(r2)
    kept = replayed(first.response["output"])
    assert len(in2) == len(in1) + len(kept) + len(recall_ids), (len(in1), len(kept), len(in2))
    trimmed = dict(r2)
    trimmed["input"] = in2[:len(in1)]
    assert ordered(trimmed) == ordered(r1), "round 2 must resend round 1's body, only input extended"
    assert_faithful(in2[len(in1):len(in1) + len(kept)], kept, "round 1's output items replayed in round 2")
    outs = in2[len(in1) + len(kept):]
    assert [o.get("call_id") for o in outs] == recall_ids, outs
    results = []
    for o in outs:
        assert list(o) == ["type", "call_id", "output"], o
        assert o["type"] == "function_call_output" and isinstance(o["output"], str), o
        results.append(json.loads(o["output"]))
    return results


def expected_usage(rounds: list[mr.Recorded]) -> dict:
    """The contract's usage rule: input (and its details) of the last round,
    output (and its details) summed, total = input + output."""
    usages = [r.response["usage"] for r in rounds]
    last = usages[-1]
    out = sum(u["output_tokens"] for u in usages)
    reasoning = sum(u["output_tokens_details"]["reasoning_tokens"] for u in usages)
    return {"input_tokens": last["input_tokens"], "input_tokens_details": last["input_tokens_details"],
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": last["input_tokens"] + out}


def check_usage(usage: dict, rounds: list[mr.Recorded]) -> None:
    want = expected_usage(rounds)
    got = {k: usage.get(k) for k in want}
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), (got, want)


def check_client_stream(raw: bytes, *, terminal: str = "response.completed", hidden: list[str] = ()) -> dict:
    """The one stream a client gets: every event named by its type, one
    response.created then one response.in_progress, one sequence_number
    counter from 0, output_index contiguous (each item added, its events,
    done), nothing of a recall item (nor of the ``hidden`` strings), one
    terminal event, last, with the created id and exactly the items the
    client saw. Returns the terminal event's response."""
    events = mr.parse_sse(raw)
    assert events, f"no events in the stream: {raw[:300]!r}"
    for name, data in events:
        assert name == data.get("type"), f"the event line says {name!r}, the data {data.get('type')!r}"
    types = [d["type"] for _, d in events]
    assert types[:2] == ["response.created", "response.in_progress"], types[:5]
    assert types.count("response.created") == 1 and types.count("response.in_progress") == 1, types
    assert [d["sequence_number"] for _, d in events] == list(range(len(events))), \
        [d["sequence_number"] for _, d in events]
    terminals = [d for _, d in events if d["type"] in TERMINAL]
    assert len(terminals) == 1 and types[-1] == terminal, types[-6:]
    final = terminals[0]["response"]
    created_id = events[0][1]["response"]["id"]
    assert final["id"] == created_id, (final["id"], created_id)
    assert events[1][1]["response"]["id"] == created_id
    open_, done = None, []
    for _, d in events[2:-1]:
        if d["type"] == "response.output_item.added":
            assert open_ is None, f"item {d['output_index']} added while item {open_} is open"
            assert d["output_index"] == len(done), (d["output_index"], len(done))
            assert not is_recall(d["item"]), d
            open_ = d["output_index"]
        elif d["type"] == "response.output_item.done":
            assert d["output_index"] == open_, (d["output_index"], open_)
            assert not is_recall(d["item"]), d
            done.append(d["item"])
            open_ = None
        elif "output_index" in d:
            assert d["output_index"] == open_, f"{d['type']} for item {d['output_index']} while {open_} is open"
    if terminal == "response.completed":
        assert open_ is None, "an item was never done"
        assert_faithful(final["output"], done, "response.completed's output: exactly the items the client saw")
    for tool in final.get("tools") or []:
        assert tool.get("name") not in RECALL_TOOLS, "the echoed tools must not show the recall tools"
    assert b"tool_result_read" not in raw and b"tool_result_search" not in raw, "a recall item reached the client"
    for h in hidden:
        assert h.encode() not in raw, f"{h!r} reached the client"
    return final


def stored_original(proxy, ref: str, credential: str) -> str:
    """The original text the proxy keeps under ``ref`` for the caller's tenant."""
    p = subprocess.run(
        [str(proxy.binary), "results", "read", "--db", str(proxy.db), "--ref", ref,
         "--tenant", tenant_of(credential), "--limit", "-1", "--json"],
        capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["content"]


def codex_order(item: dict) -> dict:
    """An output item re-serialized as Codex sends it back (its own key order,
    ``content: null`` on reasoning): values unchanged, bytes not."""
    kind = item.get("type")
    if kind == "reasoning":
        keys = ["type", "id", "summary", "content", "encrypted_content"]
        out = {k: item.get(k) for k in keys if k in item or k == "content"}
    elif kind == "function_call":
        keys = ["type", "status", "id", "name", "arguments", "call_id"]
        out = {k: item[k] for k in keys if k in item}
    elif kind == "message":
        keys = ["type", "status", "id", "role", "content", "phase"]
        out = {k: item[k] for k in keys if k in item}
        out["content"] = [{k: p[k] for k in ("type", "text", "annotations", "logprobs") if k in p}
                          for p in item["content"]]
    else:
        return dict(item)
    return out


def check_same_synopsis(proxy, stub: str, original: str, tool_name: str, tmp) -> None:
    """The stub says what ``toolstub synopsis`` says of the same output (an
    agent's wrapper taken off, its exit code and token count kept), plus its
    ref, reason and Explore lines."""
    path = tmp / "original.txt"
    path.write_text(original)
    p = subprocess.run([str(proxy.binary), "synopsis", "--tool", tool_name, str(path)],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    body = stub.split("\n\nExplore:\n")[0]
    got = [line for line in body.split("\n") if not line.startswith(("ref: ", "reason: "))]
    assert got == p.stdout.rstrip("\n").split("\n"), f"stub:\n{stub}\n--- synopsis:\n{p.stdout}"
