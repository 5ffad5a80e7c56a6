"""End-to-end on the Anthropic Messages route: the official `anthropic` Python
SDK talks to the real `toolstub serve` binary, which talks to a mock
Anthropic upstream (mock_anthropic.py) that records what it received. Each
test checks both sides: what the SDK got, and what the upstream was sent.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
from urllib.parse import urlsplit

import anthropic
import pytest

import mock_anthropic as ma
from anthropic_support import (RECALL_TOOLS, THRESHOLD, assert_faithful, check_recall_round, check_recall_tools,
                               check_stub, expected_ref, ordered, ref_of, tenant_of, tool_result_blocks)
from conftest import ANTHROPIC_KEY, free_port, start_proxy, stop_proxy

TOOL = "fetch_build_log"
CALL_ID = "toolu_01BuildLog.42"  # a "." to make safe in the ref
RECALL_ID = "toolu_recall_e2e_1"
CLIENT_ID_AGAIN = "toolu_client_again_1"
SIG1 = "EqQBCkgIBxABGAIqQOr0und1KOGxlZ0Wq4wHc0Fz2ZwJg+ROUND1signature=="
SIG2 = "EqQBCkgIBxABGAIqQLz9WnBr7mYt1FhN0d4Q2aUk3x+ROUND2signature=="
MODEL = "claude-mock-1"

# The client's one tool; its keys deliberately unsorted (they reach the prompt).
CLIENT_TOOL = {
    "name": TOOL,
    "description": "The log of a CI job.",
    "input_schema": {"type": "object", "required": ["job"],
                     "properties": {"job": {"type": "string"}, "tail": {"type": "integer", "minimum": 1}}},
    "cache_control": {"type": "ephemeral"},
}
SYSTEM = [{"type": "text", "text": "You are a build doctor.", "cache_control": {"type": "ephemeral"}}]


def build_log(lines: int, salt: str = "") -> str:
    """A build log with some non-ASCII (lengths are counted in code points)."""
    out = [f"build 42{salt}: started — 2024-05-01T12:00:00Z ✓"]
    for i in range(lines):
        out.append(f"[{i:05d}] Compiling crate_{i % 37} v0.{i % 9}.{i % 5} (/src/crates/{i % 37}) … ok")
    out.append("error[E0425]: cannot find value `stations` in this scope → src/main.rs:42")
    return "\n".join(out)


BIG = build_log(600)  # ~33,000 characters
assert 30_000 < len(BIG) < 40_000 and len(BIG) != len(BIG.encode()), len(BIG)
BLOCKS = [BIG[:17_000], BIG[17_000:]]  # the same output as two text blocks
SMALL = build_log(60)
assert len(SMALL) < THRESHOLD


def result_block(content, **extra) -> dict:
    block = {"type": "tool_result", "tool_use_id": CALL_ID, "content": content}
    block.update(extra)
    block["cache_control"] = {"type": "ephemeral"}
    return block


def conversation(content, **extra) -> list[dict]:
    return [
        {"role": "user", "content": "Why did build 42 fail?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "I'll fetch the log."},
            {"type": "tool_use", "id": CALL_ID, "name": TOOL, "input": {"job": "build-42"}},
        ]},
        {"role": "user", "content": [result_block(content, **extra), {"type": "text", "text": "Be brief."}]},
    ]


def request(content=BIG, **extra) -> dict:
    return dict(model=MODEL, max_tokens=1024, system=SYSTEM, tools=[CLIENT_TOOL],
                messages=conversation(content, **extra), metadata={"user_id": "e2e-user"})


def original_text(content) -> str:
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def as_blocks(parts: list[str]) -> list[dict]:
    return [{"type": "text", "text": p} for p in parts]


def assert_stubbed(upstream: ma.Recorded, sdk_body: dict, content) -> str:
    """The upstream body is the SDK's with only the tool_result's content
    replaced by a stub (a string stays a string; text blocks become one text
    block) and the recall tools appended. Returns the stub."""
    got = upstream.json
    assert isinstance(got, dict), upstream.body[:300]
    assert upstream.header("content-length") == str(len(upstream.body))
    sent_block = sdk_body["messages"][2]["content"][0]
    block = got["messages"][2]["content"][0]
    assert list(block) == list(sent_block), "the tool_result keeps its keys, in order"
    for key in sent_block:
        if key != "content":
            assert block[key] == sent_block[key], key
    if isinstance(content, str):
        assert isinstance(block["content"], str), block["content"]
        stub = block["content"]
    else:
        assert isinstance(block["content"], list) and len(block["content"]) == 1, block["content"]
        assert list(block["content"][0]) == ["type", "text"], block["content"]
        assert block["content"][0]["type"] == "text"
        stub = block["content"][0]["text"]
    check_stub(stub, call_id=CALL_ID, original=original_text(content), tool_name=TOOL)
    check_recall_tools(got["tools"], [TOOL])
    assert got["tools"][0] == CLIENT_TOOL
    # Everything else as the SDK sent it, key order included.
    restored = json.loads(upstream.body)
    restored["messages"][2]["content"][0]["content"] = content
    restored["tools"] = restored["tools"][:1]
    assert ordered(restored) == ordered(sdk_body)
    assert len(upstream.body) < len(ordered(sdk_body).encode()) - 20_000
    return stub


def read_stored(proxy, ref: str, tenant: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(proxy.binary), "results", "read", "--db", str(proxy.db), "--ref", ref,
         "--tenant", tenant, "--limit", "-1", "--json"],
        capture_output=True, text=True, timeout=20)


# --- rewriting --------------------------------------------------------------


@pytest.mark.parametrize("route", ["messages", "beta"])
@pytest.mark.parametrize("shape", ["string", "blocks"])
def test_a_large_tool_result_arrives_upstream_as_a_stub(aclient, sent, amock, aproxy, shape, route):
    content = BIG if shape == "string" else as_blocks(BLOCKS)
    if route == "beta":
        # The Python SDK sends no ?beta=true; Claude Code's SDK does: asked for here.
        create = aclient.beta.messages.with_raw_response.create
        kwargs = dict(request(content), betas=["interleaved-thinking-2025-05-14"], extra_query={"beta": "true"})
    else:
        create = aclient.messages.with_raw_response.create
        kwargs = request(content)
    raw = create(**kwargs)
    assert raw.status_code == 200
    assert raw.headers["x-toolstub-externalized"] == "1"
    assert int(raw.headers["x-toolstub-saved-chars"]) > len(BIG) - 5_000
    assert raw.headers["request-id"] == "req_mock_anthropic_1"  # upstream headers pass through
    message = raw.parse()
    assert message.id == "msg_mock_1"
    assert [b.text for b in message.content] == [ma.DEFAULT_TEXT]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == ma.USAGE["input_tokens"]
    assert message.usage.output_tokens == ma.USAGE["output_tokens"]

    sdk_body = json.loads(sent.last().content)
    assert sdk_body["messages"][2]["content"][0]["content"] == content  # the SDK sent the original
    [upstream] = amock.messages_posts()
    assert upstream.path == ("/v1/messages?beta=true" if route == "beta" else "/v1/messages")
    # anthropic 2.x sends the key as a Bearer token (Claude Code sends x-api-key).
    assert upstream.header("authorization") == f"Bearer {ANTHROPIC_KEY}"
    assert upstream.header("anthropic-version") == sent.last().headers["anthropic-version"]
    if route == "beta":
        assert upstream.header("anthropic-beta") == "interleaved-thinking-2025-05-14"
    stub = assert_stubbed(upstream, sdk_body, content)

    # The same request again: the upstream body is byte-identical (idempotent
    # ref, stable prompt prefix).
    create(**kwargs)
    first, second = amock.messages_posts()
    assert second.body == first.body

    # The original is stored under the caller's tenant only.
    ref = ref_of(stub)
    stored = read_stored(aproxy, ref, tenant_of(f"Bearer {ANTHROPIC_KEY}"))
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["content"] == original_text(content)
    other = read_stored(aproxy, ref, "anonymous")
    assert other.returncode != 0, "another tenant must not read the ref"


@pytest.mark.parametrize("case", ["small", "is_error", "count_tokens_small", "no_tools"])
def test_nothing_over_budget_goes_upstream_byte_for_byte(aclient, sent, amock, case):
    if case == "small":
        raw = aclient.messages.with_raw_response.create(**request(SMALL))
    elif case == "is_error":
        # An error output is never stubbed, however large.
        raw = aclient.messages.with_raw_response.create(**request(BIG, is_error=True))
    elif case == "count_tokens_small":
        kwargs = request(SMALL)
        del kwargs["max_tokens"], kwargs["metadata"]
        raw = aclient.messages.with_raw_response.count_tokens(**kwargs)
    else:
        raw = aclient.messages.with_raw_response.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello, naïve café ☕"}])
    assert raw.status_code == 200
    assert "x-toolstub-externalized" not in raw.headers
    raw.parse()
    [upstream] = amock.requests()
    sdk_request = sent.last()
    assert upstream.body == sdk_request.content  # byte for byte
    assert upstream.path == sdk_request.url.raw_path.decode()
    for name, value in sdk_request.headers.items():
        if name.lower() not in ("host", "connection", "content-length", "transfer-encoding"):
            assert upstream.header(name) == value, name
    assert not any(n.startswith("x-toolstub-") for n in upstream.header_names())
    names = [t["name"] for t in upstream.json.get("tools", [])]
    assert not set(names) & set(RECALL_TOOLS)


def test_count_tokens_carries_the_same_stub_and_recall_tools(aclient, sent, amock):
    aclient.messages.create(**request(BIG))
    [messages_post] = amock.messages_posts()

    for betas in (None, ["token-counting-2024-11-01"]):
        kwargs = request(BIG)
        del kwargs["max_tokens"], kwargs["metadata"]
        if betas:
            counted = aclient.beta.messages.count_tokens(**kwargs, betas=betas, extra_query={"beta": "true"})
        else:
            counted = aclient.messages.count_tokens(**kwargs)
        upstream = amock.count_tokens_posts()[-1]
        assert upstream.path == "/v1/messages/count_tokens" + ("?beta=true" if betas else "")
        assert counted.input_tokens == ma.count_tokens_of(upstream)  # the mock's answer, through
        sdk_body = json.loads(sent.last().content)
        stub = assert_stubbed(upstream, sdk_body, BIG)
        assert stub == messages_post.json["messages"][2]["content"][0]["content"]
        assert ordered(upstream.json["tools"]) == ordered(messages_post.json["tools"])


def test_a_stream_without_recall_reaches_the_sdk_whole(aclient, sent, amock):
    answer = ma.message([ma.thinking("The log ends in E0425.", SIG1),
                         ma.text("`stations` is not defined at src/main.rs:42.")], id="msg_stream_plain")
    amock.script = lambda r: answer
    with aclient.messages.stream(**request(BIG)) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text == answer["content"][1]["text"]
    assert final.id == "msg_stream_plain"
    assert [b.to_dict() for b in final.content] == answer["content"]
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == ma.USAGE["input_tokens"]
    assert final.usage.output_tokens == ma.USAGE["output_tokens"]
    [upstream] = amock.messages_posts()
    assert upstream.json["stream"] is True
    assert_stubbed(upstream, json.loads(sent.last().content), BIG)


# --- a recall round in the middle of the answer ------------------------------

ROUND1_USAGE = {"input_tokens": 1000, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 300,
                "output_tokens": 25}
ROUND2_USAGE = {"input_tokens": 1100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1500,
                "output_tokens": 40}
# The usage the client must see: the context of the last round, the output of all.
MERGED_USAGE = {"input_tokens": 1100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1500,
                "output_tokens": 65}
READ_LIMIT = 40


def round1(ref: str, *, mixed: bool = False) -> dict:
    content = [ma.thinking("The log is stored; I will read its start.", SIG1), ma.text("Let me look."),
               ma.tool_use(RECALL_ID, "tool_result_read", {"ref": ref, "offset": 0, "limit": READ_LIMIT})]
    if mixed:  # a client tool call in the same response: dropped by the proxy
        content.append(ma.tool_use(CLIENT_ID_AGAIN, TOOL, {"job": "build-41"}))
    return ma.message(content, "tool_use", id="msg_round_1", usage=ROUND1_USAGE)


def round2_text(read: dict) -> str:
    return "It begins with " + json.dumps(read["content"], ensure_ascii=False)


def round2(read: dict) -> dict:
    return ma.message([ma.thinking("It starts with the build header.", SIG2), ma.text(round2_text(read))],
                      "end_turn", id="msg_round_2", usage=ROUND2_USAGE)


class RecallScript:
    """Round 1 (the request offers tool_result_read and carries a stub) calls
    tool_result_read on the stub's ref; round 2 (its last message answers that
    call) quotes what was read. Anything else gets the default text."""

    def __init__(self, *, mixed: bool = False, gate: threading.Event | None = None):
        self.mixed = mixed
        self.gate = gate
        self.round1: dict | None = None
        self.round2: dict | None = None

    def __call__(self, r: ma.Recorded):
        body = r.json
        last = ma.last_tool_results(body)
        if last and last[0].get("tool_use_id") == RECALL_ID:
            self.round2 = round2(json.loads(ma.tool_result_text(last[0])))
            return ma.Reply(message=self.round2, gate=self.gate)
        if "tool_result_read" in ma.tool_names(body):
            refs = [ma.stub_ref(ma.tool_result_text(b)) for b in ma.tool_results(body)]
            refs = [x for x in refs if x]
            if refs:
                self.round1 = round1(refs[0], mixed=self.mixed)
                return self.round1
        return None


def expected_visible() -> list[dict]:
    read = {"content": BIG[:READ_LIMIT]}
    return [ma.thinking("The log is stored; I will read its start.", SIG1), ma.text("Let me look."),
            ma.thinking("It starts with the build header.", SIG2), ma.text(round2_text(read))]


def assert_recall_upstream(amock, script: RecallScript, sdk_body: dict) -> None:
    """Two rounds upstream: round 1 stubbed; round 2 appends round 1's
    assistant blocks (thinking with its signature, byte-faithful) and the
    recall result read from the store."""
    first, second = amock.messages_posts()
    stub = assert_stubbed(first, sdk_body, BIG)
    [result] = check_recall_round(first, second, script.round1["content"], [RECALL_ID])
    assert result["ref"] == ref_of(stub) == expected_ref(CALL_ID, BIG)
    assert result["content"] == BIG[:READ_LIMIT]
    assert result["offset"] == 0
    assert result["total_chars"] == len(BIG)
    assert result["has_more"] is True
    assert result["next_offset"] == READ_LIMIT
    assert result["offset_unit"] == "unicode_code_point"
    assert "is_error" not in second.json["messages"][-1]["content"][0]


def test_recall_round_in_a_stream_raw_events(aclient, sent, amock):
    """The SDK's raw events (stream=True): one message_start, contiguous
    indexes, no recall tool_use, both rounds' text and thinking, one
    message_delta and one message_stop. Round 1's text reaches the client
    before the upstream answers round 2."""
    gate = threading.Event()
    script = amock.script = RecallScript(gate=gate)
    events = []
    for event in aclient.messages.create(**request(BIG), stream=True):
        events.append(event)
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            gate.set()  # round 2 is answered only once round 1's text got here
    assert amock.gates == [True], "round 1's text did not reach the client before round 2 was answered"

    types = [e.type for e in events]
    assert types[0] == "message_start" and types.count("message_start") == 1, types
    assert types[-1] == "message_stop" and types.count("message_stop") == 1, types
    assert types.count("message_delta") == 1 and types[-2] == "message_delta", types
    assert events[0].message.id == "msg_round_1"

    # Blocks: started in index order from 0, each stopped before the next starts.
    blocks: dict[int, dict] = {}
    open_index = None
    for e in events:
        if e.type == "content_block_start":
            assert open_index is None, f"block {e.index} started inside block {open_index}"
            assert e.index == len(blocks), f"index {e.index} after {len(blocks)} blocks"
            blocks[e.index] = e.content_block.to_dict()
            open_index = e.index
        elif e.type == "content_block_delta":
            assert e.index == open_index, (e.index, open_index)
            block, d = blocks[e.index], e.delta
            if d.type == "text_delta":
                block["text"] += d.text
            elif d.type == "thinking_delta":
                block["thinking"] += d.thinking
            elif d.type == "signature_delta":
                block["signature"] = d.signature
            else:
                pytest.fail(f"unexpected delta {d.type} (a recall call leaked?)")
        elif e.type == "content_block_stop":
            assert e.index == open_index, (e.index, open_index)
            open_index = None
    assert open_index is None
    assert [blocks[i] for i in range(len(blocks))] == expected_visible()

    delta = events[-2]
    assert delta.delta.stop_reason == "end_turn"
    usage = events[0].message.usage.to_dict()
    usage.update({k: v for k, v in delta.usage.to_dict().items() if v is not None})
    assert {k: usage[k] for k in MERGED_USAGE} == MERGED_USAGE

    assert_recall_upstream(amock, script, json.loads(sent.last().content))


def test_recall_round_in_a_stream_final_message(aclient, sent, amock):
    """messages.stream(...): text_stream and get_final_message() see one
    message made of both rounds' visible blocks."""
    script = amock.script = RecallScript()
    with aclient.messages.stream(**request(as_blocks([BIG]))) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    visible = expected_visible()
    assert streamed_text == visible[1]["text"] + visible[3]["text"]
    assert final.id == "msg_round_1"
    assert [b.to_dict() for b in final.content] == visible
    assert final.stop_reason == "end_turn"
    assert {k: getattr(final.usage, k) for k in MERGED_USAGE} == MERGED_USAGE
    first, second = amock.messages_posts()
    assert_stubbed(first, json.loads(sent.last().content), as_blocks([BIG]))
    [result] = check_recall_round(first, second, script.round1["content"], [RECALL_ID])
    assert result["content"] == BIG[:READ_LIMIT]


def test_recall_round_non_streaming(aclient, sent, amock):
    script = amock.script = RecallScript()
    raw = aclient.messages.with_raw_response.create(**request(BIG))
    assert raw.status_code == 200
    body = json.loads(raw.http_response.content)
    assert body["id"] == "msg_round_1"
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["content"] == expected_visible()
    assert body["stop_reason"] == "end_turn"
    assert {k: body["usage"][k] for k in MERGED_USAGE} == MERGED_USAGE
    message = raw.parse()
    assert [b.type for b in message.content] == ["thinking", "text", "thinking", "text"]
    assert message.content[0].signature == SIG1 and message.content[2].signature == SIG2
    assert_recall_upstream(amock, script, json.loads(sent.last().content))


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_tool_call_beside_a_recall_call_is_dropped(aclient, sent, amock, stream):
    """A round that calls tool_result_read and a client tool: the client tool
    call is dropped (the model issues it again once it has read); the client
    sees the text of both rounds and no tool_use at all."""
    script = amock.script = RecallScript(mixed=True)
    if stream:
        with aclient.messages.stream(**request(BIG)) as s:
            final = s.get_final_message()
    else:
        final = aclient.messages.create(**request(BIG))
    assert [b.to_dict() for b in final.content] == expected_visible()
    assert final.stop_reason == "end_turn"
    first, second = amock.messages_posts()
    assert_stubbed(first, json.loads(sent.last().content), BIG)
    check_recall_round(first, second, script.round1["content"], [RECALL_ID])
    assert CLIENT_ID_AGAIN not in second.body.decode()


def test_the_raw_sse_of_a_recall_round(aproxy, amock):
    """The bytes on the wire, read without an SDK: every event is
    `event: <type>` and `data: <json of that type>`, then a blank line; pings
    arrive; the recall call appears nowhere."""
    script = amock.script = RecallScript()
    body = dict(request(BIG), stream=True)
    url = urlsplit(aproxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(body).encode(),
                     headers={"content-type": "application/json", "x-api-key": ANTHROPIC_KEY,
                              "anthropic-version": "2023-06-01", "accept": "text/event-stream"})
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    assert response.status == 200, raw[:500]
    assert response.getheader("content-type", "").startswith("text/event-stream")
    assert response.getheader("x-toolstub-externalized") == "1"
    text = raw.decode()
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for chunk in text[:-2].split("\n\n"):
        lines = chunk.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        kind, data = lines[0][len("event: "):], json.loads(lines[1][len("data: "):])
        assert data["type"] == kind, chunk
        events.append(data)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert kinds.count("message_start") == kinds.count("message_delta") == kinds.count("message_stop") == 1
    assert "ping" in kinds
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [e["index"] for e in starts] == [0, 1, 2, 3]
    assert [e["content_block"]["type"] for e in starts] == ["thinking", "text", "thinking", "text"]
    assert b"tool_result_read" not in raw and RECALL_ID.encode() not in raw
    assert script.round2 is not None
    assert len(amock.messages_posts()) == 2


def test_the_next_turn_restores_the_hidden_exchange(aclient, amock):
    """Turn 2 sends back the merged message the client saw, as the SDK's
    idiom does (the response's content objects, which the SDK serializes with
    its own key order: signature, thinking, type); upstream, it is replaced
    by the exchange as the model had it: assistant (round 1 with the recall
    call), user (its result), assistant (round 2)."""
    script = amock.script = RecallScript()
    with aclient.messages.stream(**request(BIG)) as s:
        final = s.get_final_message()
    first, second = amock.messages_posts()
    seen = [b.to_dict() for b in final.content]
    assert seen == expected_visible()

    turn2 = request(BIG)
    turn2["messages"] += [{"role": "assistant", "content": final.content},
                          {"role": "user", "content": "Thanks. Where is `stations` defined?"}]
    amock.script = lambda r: ma.message([ma.text("Nowhere.")], id="msg_turn_2")
    reply = aclient.messages.create(**turn2)
    assert [b.text for b in reply.content] == ["Nowhere."]
    third = amock.messages_posts()[-1]
    got = third.json["messages"]
    assert len(got) == 3 + 3 + 1, [m["role"] for m in got]
    assert ordered(got[:3]) == ordered(first.json["messages"]), "turn 1's messages, stubbed as before"
    assert_faithful(got[3], second.json["messages"][-2], "round 1 restored as sent in round 2")
    assert_faithful(got[4], second.json["messages"][-1], "the recall result restored as sent")
    assert_faithful(got[5], {"role": "assistant", "content": script.round2["content"]}, "round 2 restored")
    assert got[6] == turn2["messages"][-1]
    check_recall_tools(third.json["tools"], [TOOL])


# --- errors -----------------------------------------------------------------


@pytest.fixture(scope="module")
def unreachable_proxy(tmp_path_factory):
    """A proxy whose upstream is a port nothing listens on."""
    p = start_proxy(f"http://127.0.0.1:{free_port()}", tmp_path_factory.mktemp("unreachable"))
    yield p
    stop_proxy(p)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("content", ["plain", "stubbed"])
def test_an_unreachable_upstream_is_a_502_in_anthropic_format(unreachable_proxy, content, stream):
    kwargs = request(BIG) if content == "stubbed" else dict(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello"}])
    with anthropic.Anthropic(base_url=unreachable_proxy.url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=30.0,
                             http_client=anthropic.DefaultHttpxClient(trust_env=False)) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(**kwargs, stream=stream)
    error = caught.value
    assert error.status_code == 502
    assert error.response.headers["content-type"].startswith("application/json")
    body = error.response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert body["error"]["type"] == "api_error", body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body


RATE_LIMITED = (b'{"type":"error","error":{"type":"rate_limit_error",'
                b'"message":"Number of request tokens has exceeded your per-minute rate limit (e2e)"},'
                b'"request_id":"req_429_e2e"}')


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("content", ["plain", "stubbed"])
def test_an_upstream_429_passes_through_verbatim(aclient, amock, content, stream):
    kwargs = request(BIG) if content == "stubbed" else dict(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello"}])
    amock.script = lambda r: ma.Reply(status=429, body=RATE_LIMITED, headers=[
        ("retry-after", "7"), ("anthropic-ratelimit-tokens-remaining", "0"), ("request-id", "req_429_e2e"),
        ("x-should-retry", "true")])
    with pytest.raises(anthropic.RateLimitError) as caught:
        aclient.messages.create(**kwargs, stream=stream)
    error = caught.value
    assert error.status_code == 429
    assert error.response.content == RATE_LIMITED
    assert error.response.headers["retry-after"] == "7"
    assert error.response.headers["anthropic-ratelimit-tokens-remaining"] == "0"
    assert error.response.headers["request-id"] == "req_429_e2e"
    assert error.response.headers["x-should-retry"] == "true"
    assert error.body == json.loads(RATE_LIMITED)
    [upstream] = amock.messages_posts()  # max_retries=0: once
    if content == "stubbed":
        [(_, _, block)] = tool_result_blocks(upstream.json)
        check_stub(block["content"], call_id=CALL_ID, original=BIG, tool_name=TOOL)


@pytest.fixture(scope="module")
def impatient_proxy(anthropic_upstream, tmp_path_factory):
    """A proxy that waits at most 1 s for the upstream's first byte."""
    p = start_proxy(anthropic_upstream.url, tmp_path_factory.mktemp("impatient"),
                    extra_env={"TOOLSTUB_UPSTREAM_FIRST_BYTE_TIMEOUT_MS": "1000"})
    yield p
    stop_proxy(p)


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_timeout_is_a_504_in_anthropic_format(impatient_proxy, amock, stream):
    amock.script = lambda r: ma.Reply(message=ma.message([ma.text("too late")]), delay=3.0)
    with anthropic.Anthropic(base_url=impatient_proxy.url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=30.0,
                             http_client=anthropic.DefaultHttpxClient(trust_env=False)) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(**request(BIG), stream=stream)
    error = caught.value
    assert error.status_code == 504
    body = error.response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert body["error"]["type"] == "timeout_error", body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
