"""What the Anthropic e2e tests share: the contract's constants and the checks
of a rewritten request and of a recall round, as the upstream saw them."""

from __future__ import annotations

import hashlib
import json
import re

import mock_anthropic as ma

STUB_HEADER = "[toolstub: tool output externalized]"
RECALL_TOOLS = ["tool_result_read", "tool_result_search", "tool_result_list"]
THRESHOLD = 20_000


def ordered(value) -> str:
    """A JSON rendering that keeps key order, so == also compares key order."""
    return json.dumps(value, ensure_ascii=False)


def assert_faithful(got, want, what: str) -> None:
    """``got`` is ``want`` byte-faithfully: the same values, and the same key
    order (a block rebuilt from stream events keeps the wire's order, type
    first, and a tool_use input keeps the model's own JSON)."""
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), \
        f"{what}: not the same JSON\n got: {ordered(got)[:1500]}\nwant: {ordered(want)[:1500]}"
    assert ordered(got) == ordered(want), \
        f"{what}: the same JSON, but its key order changed\n got: {ordered(got)[:1500]}\nwant: {ordered(want)[:1500]}"


def sha16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def safe_id(call_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", call_id).strip("_-")[:96] or "tool"


def expected_ref(call_id: str, text: str) -> str:
    return f"tr_{safe_id(call_id)}_{sha16(text)}"


def tenant_of(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()[:16]


def stub_lines(stub: str) -> list[str]:
    lines = stub.split("\n")
    assert lines[0] == STUB_HEADER, f"not a stub:\n{stub[:500]}"
    return lines


def ref_of(stub: str) -> str:
    refs = [line[len("ref: "):] for line in stub_lines(stub) if line.startswith("ref: ")]
    assert len(refs) == 1, f"a stub has one ref line:\n{stub}"
    assert re.fullmatch(r"tr_[A-Za-z0-9_-]+_[0-9a-f]{16}", refs[0]), refs[0]
    return refs[0]


def check_stub(stub: str, *, call_id: str, original: str, tool_name: str | None = None) -> str:
    """The stub of ``original`` (the tool_result's text) answering ``call_id``; returns its ref."""
    lines = stub_lines(stub)
    ref = ref_of(stub)
    assert ref == expected_ref(call_id, original), (ref, expected_ref(call_id, original))
    assert f"original_chars: {len(original)}" in lines, stub
    assert f"sha256: {sha16(original)}" in lines, stub
    if tool_name is not None:
        assert f"tool_name: {tool_name}" in lines, stub
    assert f"Use tool_result_read with ref={ref}" in stub
    assert len(stub) < 5_000, len(stub)
    return ref


# The models that bind each thinking block to the tools before it (the
# proxy's recall.tools_from_start): their conversations get the recall
# tools from the first request on.
BINDS_THINKING = ("claude-fable", "claude-mythos", "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")


def binds_thinking(r) -> bool:
    """Whether a recorded request's model (in the body, or in a Bedrock or
    Vertex AI path) binds its thinking to the tools."""
    model = str(r.json.get("model", "")) + " " + r.path
    return any(m in model for m in BINDS_THINKING)


def check_recall_tools(tools: list[dict], client_tool_names: list[str]) -> None:
    """The client's tools unchanged and first, then the three recall tools in
    Anthropic's shape, with no cache_control."""
    assert [t.get("name") for t in tools] == client_tool_names + RECALL_TOOLS
    for tool in tools[len(client_tool_names):]:
        assert set(tool) == {"name", "description", "input_schema"}, tool
        assert isinstance(tool["description"], str) and tool["description"]
        assert tool["input_schema"]["type"] == "object"
    read = tools[len(client_tool_names)]["input_schema"]
    assert {"ref", "offset", "limit"} <= set(read["properties"]), read
    assert "ref" in read.get("required", []), read


def tool_result_blocks(body: dict) -> list[tuple[int, int, dict]]:
    """(message index, block index, block) of every tool_result in user messages."""
    out = []
    for i, m in enumerate(body.get("messages", [])):
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            out += [(i, j, b) for j, b in enumerate(m["content"]) if b.get("type") == "tool_result"]
    return out


def check_recall_round(first: ma.Recorded, second: ma.Recorded, round1_content: list[dict],
                       recall_ids: list[str]) -> list[dict]:
    """Round 2 upstream is round 1's body plus the assistant message of round 1
    (its thinking/text/recall tool_use blocks byte-faithful, client tool_use
    dropped) and a user message with one tool_result per recall call.
    Returns the parsed recall results."""
    r1, r2 = first.json, second.json
    assert second.header("content-length") == str(len(second.body))
    assert len(r2["messages"]) == len(r1["messages"]) + 2, [m["role"] for m in r2["messages"]]
    trimmed = dict(r2)
    trimmed["messages"] = r2["messages"][:-2]
    assert ordered(trimmed) == ordered(r1), "round 2 must resend round 1's body unchanged"
    assistant, user = r2["messages"][-2:]
    kept = [b for b in round1_content
            if b["type"] != "tool_use" or b["name"] in RECALL_TOOLS]
    assert_faithful(assistant, {"role": "assistant", "content": kept}, "round 1's assistant message in round 2")
    assert user["role"] == "user"
    assert [b["tool_use_id"] for b in user["content"]] == recall_ids
    results = []
    for block in user["content"]:
        assert block["type"] == "tool_result"
        assert set(block) <= {"type", "tool_use_id", "content", "is_error"}, block
        assert isinstance(block["content"], str), block
        results.append(json.loads(block["content"]))
    return results
