"""End-to-end on the OpenAI Responses route: the official `openai` Python SDK
(`client.responses.create`, `client.responses.stream`, `retrieve`) talks to
the real `toolstub serve` binary, which talks to a mock Responses upstream
(mock_responses.py) that records what it received and keeps state like the
real API (previous_response_id, store: false). Each test checks both sides:
what the SDK got, and what the upstream was sent.

The tests named ``test_mock_...`` run the SDK straight against the mock: they
hold the mock to what the SDK's own (strict) stream parser and the real API
accept and reject.
"""

from __future__ import annotations

import json
import secrets
import threading

import httpx2 as httpx
import openai
import pytest

import mock_responses as mr
from conftest import API_KEY, free_port, responses_client, start_proxy, stop_proxy
from responses_support import (RECALL_TOOLS, STUB_HEADER, THRESHOLD, assert_faithful, check_client_stream,
                               check_recall_round, check_recall_tools, check_stub, check_usage, codex_order,
                               ordered, ref_of, stored_original, visible)

MODEL = "gpt-mock-1"
TOOL = "fetch_build_log"
CALL_ID = "call_BuildLog.42"  # a "." to make safe in the ref
RECALL_ID = "call_recall_e2e_1"
CLIENT_AGAIN = "call_client_again_1"
CREDENTIAL = f"Bearer {API_KEY}"
RECALLING = "Let me read the stored log."
IMAGE = {"type": "input_image", "detail": "low", "image_url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}

# The client's one tool; its keys deliberately not sorted (they reach the prompt).
CLIENT_TOOL = {"type": "function", "name": TOOL, "description": "The log of a CI job.",
               "parameters": {"type": "object", "required": ["job"],
                              "properties": {"job": {"type": "string"}, "tail": {"type": "integer", "minimum": 1}},
                              "additionalProperties": False},
               "strict": False}


def build_log(lines: int, salt: str = "") -> str:
    """A build log with some non-ASCII (lengths are counted in code points)."""
    out = [f"build 42{salt}: started — 2024-05-01T12:00:00Z ✓"]
    for i in range(lines):
        out.append(f"[{i:05d}] Compiling crate_{i % 37} v0.{i % 9}.{i % 5} (/src/crates/{i % 37}) … ok")
    out.append("error[E0425]: cannot find value `stations` in this scope → src/main.rs:42")
    return "\n".join(out)


BIG = build_log(600)
assert 30_000 < len(BIG) < 40_000 and len(BIG) != len(BIG.encode()), len(BIG)
SMALL = build_log(60)
assert len(SMALL) < THRESHOLD


def conversation(output, shape: str = "function", salt: str = "") -> list[dict]:
    if shape == "custom":
        call = {"type": "custom_tool_call", "id": "ctc_e2e_0001", "status": "completed", "call_id": CALL_ID,
                "name": TOOL, "input": "job=build-42"}
        result = {"type": "custom_tool_call_output", "call_id": CALL_ID, "output": output}
    else:
        call = {"type": "function_call", "id": "fc_e2e_0001", "status": "completed", "name": TOOL,
                "arguments": json.dumps({"job": "build-42"}), "call_id": CALL_ID}
        result = {"type": "function_call_output", "call_id": CALL_ID, "output": output}
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Why did build 42 fail?{salt}"}]},
        call,
        result,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Be brief."}]},
    ]


def request(output=BIG, shape: str = "function", salt: str = "", **extra) -> dict:
    body = dict(model=MODEL, instructions="You are a build doctor.", input=conversation(output, shape, salt),
                tools=[CLIENT_TOOL], prompt_cache_key="e2e-build-doctor", metadata={"suite": "e2e"})
    body.update(extra)
    return body


def output_item(body: dict) -> dict:
    [item] = [i for i in body["input"] if i.get("type") in ("function_call_output", "custom_tool_call_output")]
    return item


def sdk_body(sent) -> dict:
    return json.loads(sent.last().content)


class RecallScript:
    """The mock's model: a stub in the last tool output -> tool_result_read on
    its ref (round 1, after some reasoning and text); the recall result ->
    a final message quoting it (round 2). ``beside``: round 1 also calls the
    client's tool; round 2 then calls it again instead of answering."""

    def __init__(self, beside: bool = False, limit: int = 400):
        self.beside, self.limit = beside, limit
        self.final_text: str | None = None

    def __call__(self, r: mr.Recorded):
        conv = r.conversation or []
        last = mr.last_tool_outputs(conv)
        outputs = {o["call_id"]: o for o in mr.tool_outputs(conv)}
        if last and last[-1]["call_id"] == RECALL_ID:
            read = json.loads(last[-1]["output"])
            if self.beside:
                return [mr.function_call(CLIENT_AGAIN, TOOL, {"job": "build-43"})]
            self.final_text = f"FINAL read={json.dumps(read['content'][:60])} total_chars={read['total_chars']}"
            return [mr.reasoning("I have what I need."), mr.message(self.final_text, phase="final_answer")]
        if CALL_ID in outputs and RECALL_ID not in outputs:
            text = mr.output_text_of(outputs[CALL_ID]["output"])
            ref = mr.stub_ref(text) if text.startswith(STUB_HEADER) else None
            if ref is None or "tool_result_read" not in mr.tool_names(r.json):
                return [mr.message(f"NOT-STUBBED ({len(text)} characters inline)")]
            out = [mr.reasoning("The log was externalized; read its start."), mr.message(RECALLING),
                   mr.function_call(RECALL_ID, "tool_result_read", {"ref": ref, "offset": 0, "limit": self.limit})]
            if self.beside:
                out.append(mr.function_call("call_client_early", TOOL, {"job": "build-41"}))
            return out
        return None


def recall_rounds(rmock) -> tuple[mr.Recorded, mr.Recorded]:
    posts = rmock.responses_posts()
    assert len(posts) == 2, [(p.path, p.status) for p in posts]
    assert all(p.status == 200 for p in posts), [p.status for p in posts]
    return posts[0], posts[1]


def check_turn1_upstream(first: mr.Recorded, body: dict) -> str:
    """Round 1 upstream: the SDK's body with the one output stubbed and the
    recall tools appended; returns the stub."""
    stub = mr.output_text_of(output_item(first.json)["output"])
    check_stub(stub, call_id=CALL_ID, original=BIG, tool_name=TOOL)
    check_recall_tools(first.json["tools"], [CLIENT_TOOL])
    restored = json.loads(first.body)
    output_item(restored)["output"] = BIG
    restored["tools"] = restored["tools"][:1]
    assert ordered(restored) == ordered(body), "round 1 must be the client's body but for the stub and the tools"
    return stub


# --- the mock itself, with no proxy -------------------------------------------


def test_mock_streams_what_the_sdk_parser_accepts(rdirect, rmock):
    rmock.script = lambda r: [mr.reasoning("Think.", "More."), mr.message("Hello there, streaming world."),
                              mr.function_call("call_x", TOOL, {"job": "j"})]
    with rdirect.responses.stream(**request(SMALL)) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    [r] = rmock.responses_posts()
    assert final.id == r.response["id"] and final.id.startswith("resp_")
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Hello there, streaming world."
    assert final.usage.total_tokens == r.response["usage"]["total_tokens"]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert {"response.reasoning_summary_text.delta", "response.output_text.delta",
            "response.function_call_arguments.delta", "response.output_item.done"} <= set(kinds)
    raw = rmock.responses_posts()[0].events
    assert [e["sequence_number"] for e in raw] == list(range(len(raw)))
    assert final.tools[0].name == TOOL


def test_mock_keeps_state_like_the_api(rdirect, rmock):
    rmock.script = lambda r: [mr.function_call("call_open", TOOL, {"job": "j"})] \
        if r.json["input"] == "open a call" else None
    first = rdirect.responses.create(model=MODEL, input="open a call")
    again = rdirect.responses.retrieve(first.id)
    assert again.id == first.id and again.output[0].call_id == "call_open"
    with pytest.raises(openai.BadRequestError) as caught:  # chained without the call's output
        rdirect.responses.create(model=MODEL, previous_response_id=first.id, input="go on")
    assert "No tool output found for function call call_open" in caught.value.message
    ok = rdirect.responses.create(model=MODEL, previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": "call_open", "output": "done"}])
    assert ok.output_text == mr.DEFAULT_TEXT
    assert rmock.responses_posts()[-1].conversation[-1]["output"] == "done"
    with pytest.raises(openai.BadRequestError) as caught:
        rdirect.responses.create(model=MODEL, previous_response_id="resp_nope", input="x")
    assert caught.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        rdirect.responses.retrieve("resp_nope")
    # store: false: nothing kept, and a reasoning item needs its encrypted_content.
    rmock.script = lambda r: [mr.reasoning("Hm."), mr.message("x")]
    unstored = rdirect.responses.create(model=MODEL, input="hi", store=False)
    assert unstored.output[0].encrypted_content is None  # not asked for
    with pytest.raises(openai.NotFoundError) as caught:
        rdirect.responses.create(model=MODEL, store=False, input=[unstored.output[0].to_dict(), {
            "type": "message", "role": "user", "content": "again"}])
    assert "Items are not persisted when `store` is set to false" in caught.value.message
    with_enc = rdirect.responses.create(model=MODEL, input="hi", store=False,
                                        include=["reasoning.encrypted_content"])
    items = [i.to_dict() for i in with_enc.output]
    fine = rdirect.responses.create(model=MODEL, store=False, input=items + [
        {"type": "message", "role": "user", "content": "again"}])
    assert fine.status == "completed"
    with pytest.raises(openai.BadRequestError) as caught:  # reasoning without the item that followed it
        rdirect.responses.create(model=MODEL, store=False, input=items[:1] + [
            {"type": "message", "role": "user", "content": "again"}])
    assert "without its required following item" in caught.value.message


# --- rewriting ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("shape", ["string", "parts", "custom"])
def test_a_large_tool_output_arrives_upstream_as_a_stub(rclient, sent, rmock, rproxy, shape, stream):
    """No recall call: the upstream gets the stub and the recall tools; the
    client gets the upstream's response unchanged but for the echoed tools."""
    if shape == "parts":
        output = [{"type": "input_text", "text": BIG[:17_000]}, IMAGE, {"type": "input_text", "text": BIG[17_000:]}]
    else:
        output = BIG
    body = request(output, "custom" if shape == "custom" else "function")
    raw = rclient.responses.with_raw_response.create(**body, stream=stream)
    assert raw.status_code == 200
    assert raw.headers["x-toolstub-externalized"] == "1"
    assert int(raw.headers["x-toolstub-saved-chars"]) > 25_000
    sent_body = sdk_body(sent)
    [up] = rmock.responses_posts()
    assert up.header("authorization") == CREDENTIAL
    assert up.header("content-length") == str(len(up.body))
    item = output_item(up.json)
    if shape == "parts":
        assert item["output"][0] == IMAGE, item["output"]
        assert len(item["output"]) == 2 and list(item["output"][1]) == ["type", "text"], item["output"]
        stub = item["output"][1]["text"]
    else:
        stub = item["output"]
        assert isinstance(stub, str)
    ref = check_stub(stub, call_id=CALL_ID, original=BIG, tool_name=TOOL)
    check_recall_tools(up.json["tools"], [CLIENT_TOOL])
    restored = json.loads(up.body)
    output_item(restored)["output"] = output
    restored["tools"] = restored["tools"][:1]
    assert ordered(restored) == ordered(sent_body), "only the output and the tools may change"
    assert stored_original(rproxy, ref, CREDENTIAL) == BIG

    echoed = dict(up.response)
    echoed["tools"] = [CLIENT_TOOL]
    if stream:
        events = mr.parse_sse(raw.http_response.read())
        assert len(events) == len(up.events)
        for (_, got), want in zip(events, up.events):
            if "response" in want:
                want = dict(want, response=dict(want["response"], tools=[CLIENT_TOOL]))
            assert_faithful(got, want, f"event {want['sequence_number']} ({want['type']})")
    else:
        assert_faithful(json.loads(raw.http_response.content), echoed, "the response, tools as the client sent them")
        assert raw.parse().output_text == mr.DEFAULT_TEXT


@pytest.mark.parametrize("case", ["string_input", "small_output", "image_output", "background", "compact"])
def test_what_is_not_rewritten_goes_upstream_byte_for_byte(rclient, sent, rmock, rproxy, case):
    if case == "string_input":
        raw = rclient.responses.with_raw_response.create(model=MODEL, input="Hello, naïve café ☕",
                                                         instructions="Be brief.", store=False)
    elif case == "small_output":
        raw = rclient.responses.with_raw_response.create(**request(SMALL))
    elif case == "image_output":
        # What Codex's view_image returns: one input_image part (no text to externalize).
        image = dict(IMAGE, image_url="data:image/png;base64," + "iVBORw0KGgo" * 6_000, detail="high")
        raw = rclient.responses.with_raw_response.create(**request([image]))
    elif case == "background":
        raw = rclient.responses.with_raw_response.create(**request(BIG), background=True)
    else:
        raw = rclient.post("/responses/compact", cast_to=httpx.Response,
                           body={"model": MODEL, "input": conversation(BIG)})
    assert raw.status_code == 200
    assert "x-toolstub-externalized" not in raw.headers
    [up] = rmock.requests()
    assert up.body == sent.last().content, "forwarded byte for byte"
    assert STUB_HEADER.encode() not in up.body
    got = json.loads(raw.http_response.content if case != "compact" else raw.content)
    if case == "compact":
        assert got["object"] == "response.compaction", got
    else:
        assert ordered(got) == ordered(up.response), "the upstream's response, unchanged"


# --- recall rounds -------------------------------------------------------------


def texts_of(response: dict) -> str:
    return "".join(mr.output_text(i) for i in response["output"] if i.get("type") == "message")


def check_merged(response: dict, rmock, script) -> tuple[mr.Recorded, mr.Recorded]:
    """The one response the client got for a recall round (its JSON as on the
    wire): round 1's id, every round's visible items byte-faithful, the usage
    rule, the client's tools."""
    first, second = recall_rounds(rmock)
    assert response["id"] == first.response["id"], "the client's id is round 1's"
    assert response["object"] == "response" and response["status"] == "completed"
    assert_faithful(response["output"], visible(first.response["output"]) + second.response["output"],
                    "the client sees every round's items but the recall call")
    check_usage(response["usage"], [first, second])
    assert ordered(response["tools"]) == ordered([CLIENT_TOOL])
    assert script.final_text in texts_of(response)
    return first, second


def check_merged_sdk(final, rmock, script) -> tuple[mr.Recorded, mr.Recorded]:
    """The same, as the SDK parsed it (its objects re-order keys and add
    ``parsed`` fields: values only)."""
    first, second = recall_rounds(rmock)
    want = visible(first.response["output"]) + second.response["output"]
    assert final.id == first.response["id"], "the client's id is round 1's"
    assert final.status == "completed"
    assert [(i.type, getattr(i, "id", None)) for i in final.output] == [(i["type"], i["id"]) for i in want]
    assert final.output_text == "".join(mr.output_text(i) for i in want if i["type"] == "message")
    check_usage(final.usage.to_dict(), [first, second])
    assert [t.name for t in final.tools] == [TOOL]
    assert script.final_text in final.output_text
    return first, second


def test_recall_round_non_streaming(rclient, sent, rmock, rproxy):
    script = rmock.script = RecallScript()
    body = request(BIG)
    raw = rclient.responses.with_raw_response.create(**body)
    assert raw.status_code == 200
    first, second = check_merged(json.loads(raw.http_response.content), rmock, script)
    check_turn1_upstream(first, sdk_body(sent))
    [result] = check_recall_round(first, second, [RECALL_ID])
    assert result["content"] == BIG[:400] and result["total_chars"] == len(BIG) and result["has_more"] is True
    assert raw.parse().output_text == RECALLING + script.final_text


def test_recall_round_mid_stream_through_the_sdk(rclient, sent, rmock):
    script = rmock.script = RecallScript()
    with rclient.responses.stream(**request(BIG)) as s:
        events = list(s)
        final = s.get_final_response()  # the SDK's strict accumulator: one identity, every item done
    first, second = check_merged_sdk(final, rmock, script)
    assert [e.type for e in events].count("response.created") == 1
    assert not any(getattr(e, "item", None) is not None and getattr(e.item, "name", None) in RECALL_TOOLS
                   for e in events)
    assert final.output_text == RECALLING + script.final_text
    check_turn1_upstream(first, sdk_body(sent))
    check_recall_round(first, second, [RECALL_ID])


def test_recall_round_mid_stream_on_the_wire(rproxy, rmock):
    """The raw SSE: one well-formed stream, and round 1's reasoning and text
    reach the client while the upstream still holds the rest of round 1."""
    gate = threading.Event()
    script = RecallScript()

    def gated(r: mr.Recorded):
        out = script(r)
        if isinstance(out, list) and any(i.get("name") == "tool_result_read" for i in out):
            # Hold round 1 just before the recall call's events.
            return mr.Reply(output=out, gate=gate, gate_item=2)
        return out

    rmock.script = gated
    seen_text = False
    chunks = []
    with httpx.Client(trust_env=False, timeout=30) as h:
        with h.stream("POST", rproxy.url + "/v1/responses", json=request(BIG, stream=True),
                      headers={"authorization": CREDENTIAL}) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            for chunk in resp.iter_raw():
                chunks.append(chunk)
                if not seen_text and b"response.output_text.delta" in b"".join(chunks):
                    seen_text = True
                    gate.set()
    raw = b"".join(chunks)
    assert rmock.gates == [True], "round 1's text must reach the client before round 1 ends upstream"
    final = check_client_stream(raw, hidden=[RECALL_ID])
    first, second = check_merged(final, rmock, script)
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "reasoning", "message"]


def stream_raw(rproxy, body: dict) -> bytes:
    """The raw SSE bytes the proxy answers a streamed request with."""
    with httpx.Client(trust_env=False, timeout=30) as h:
        resp = h.post(rproxy.url + "/v1/responses", json=dict(body, stream=True),
                      headers={"authorization": CREDENTIAL})
    assert resp.status_code == 200, resp.text[:500]
    return resp.content


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_call_beside_a_recall_call_is_dropped(rclient, rproxy, rmock, stream):
    """Round 1 calls tool_result_read and the client's tool: round 2 gets only
    the recall call; the client sees only round 2's call of its tool."""
    rmock.script = RecallScript(beside=True)
    if stream:
        final = check_client_stream(stream_raw(rproxy, request(BIG)), hidden=["call_client_early"])
    else:
        final = json.loads(rclient.responses.with_raw_response.create(**request(BIG)).http_response.content)
    first, second = recall_rounds(rmock)
    check_recall_round(first, second, [RECALL_ID])
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert [c["call_id"] for c in calls] == [CLIENT_AGAIN], calls
    assert "call_client_early" not in json.dumps(final)
    assert final["id"] == first.response["id"]
    assert_faithful(final["output"], visible(first.response["output"])[:-1] + second.response["output"],
                    "round 1 without its calls, then round 2")


# --- state: previous_response_id and stateless clients ------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_previous_response_id_chain_across_a_recall_round(rclient, sent, rmock, stream):
    """Turn 2 chains from the id the client got (round 1's): the upstream must
    continue from round 2 (round 1 ended in a recall call whose output only
    round 2 carries), and GET of that id shows what the client saw."""
    script = rmock.script = RecallScript()
    if stream:
        with rclient.responses.stream(**request(BIG)) as s:
            turn1 = s.get_final_response()
    else:
        turn1 = rclient.responses.create(**request(BIG))
    first, second = recall_rounds(rmock)
    assert turn1.id == first.response["id"]

    rmock.script = lambda r: [mr.message(f"TURN-2 over {len(r.conversation)} items")]
    turn2 = rclient.responses.create(model=MODEL, previous_response_id=turn1.id, tools=[CLIENT_TOOL],
                                     input=[{"type": "message", "role": "user", "content": "And the fix?"}])
    third = rmock.responses_posts()[-1]
    assert third.status == 200, third.response
    assert third.json["previous_response_id"] == second.response["id"], "chain from the last round upstream"
    want = len(second.conversation) + len(second.response["output"]) + 1
    assert turn2.output_text == f"TURN-2 over {want} items"
    back = json.loads(third.body)
    back["previous_response_id"] = turn1.id
    if len(back["tools"]) > 1:  # the recall tools may stay offered in the conversation, in the same place
        check_recall_tools(back["tools"], [CLIENT_TOOL])
        back["tools"] = back["tools"][:1]
    assert ordered(back) == ordered(sdk_body(sent)), "only previous_response_id may change"

    again = json.loads(rclient.responses.with_raw_response.retrieve(turn1.id).http_response.content)
    assert again["id"] == turn1.id
    assert_faithful(again["output"], visible(first.response["output"]) + second.response["output"],
                    "GET shows the output the client saw")
    assert script.final_text in texts_of(again)
    plain = rclient.responses.retrieve(turn2.id)  # an ordinary response: passes through
    assert plain.id == turn2.id and plain.output_text == turn2.output_text


def test_the_id_mapping_survives_a_restart(responses_upstream, rmock, tmp_path):
    rmock.script = RecallScript()
    proxy = start_proxy(responses_upstream.url, tmp_path)
    try:
        with responses_client(proxy.url + "/v1") as client:
            turn1 = client.responses.create(**request(BIG))
    finally:
        assert stop_proxy(proxy) == 0
    first, second = recall_rounds(rmock)
    proxy = start_proxy(responses_upstream.url, tmp_path)  # the same database
    try:
        rmock.script = lambda r: [mr.message("after restart")]
        with responses_client(proxy.url + "/v1") as client:
            turn2 = client.responses.create(model=MODEL, previous_response_id=turn1.id, input="Still there?")
            again = client.responses.retrieve(turn1.id)
    finally:
        stop_proxy(proxy)
    assert rmock.responses_posts()[-1].json["previous_response_id"] == second.response["id"]
    assert turn2.output_text == "after restart"
    assert again.id == turn1.id and again.output_text == turn1.output_text


def stateless_two_turns(rclient, rmock, salt: str):
    """Turn 1 (streamed, with a recall round) and turn 2 of a stateless
    client: returns (round 1, round 2, turn 2) as the upstream saw them."""
    script = rmock.script = RecallScript()
    body = request(BIG, salt=salt, store=False, include=["reasoning.encrypted_content"])
    with rclient.responses.stream(**body) as s:
        turn1 = s.get_final_response()
    first, second = recall_rounds(rmock)
    assert script.final_text in turn1.output_text
    assert all(i.get("encrypted_content") for i in second.json["input"] if i.get("type") == "reasoning")

    rmock.script = lambda r: [mr.message("TURN-2 ok")]
    seen = [codex_order(i) for i in turn1.to_dict()["output"]]
    newest = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And the fix?"}]}
    turn2 = rclient.responses.create(**dict(body, input=body["input"] + seen + [newest]))
    assert turn2.output_text == "TURN-2 ok"
    third = rmock.responses_posts()[-1]
    assert third.status == 200
    return first, second, third, newest


def check_restored(first, second, third, newest) -> None:
    got = third.json["input"]
    n = len(second.json["input"])
    assert_faithful(got[:n], second.json["input"], "turn 1's rounds restored: round 2's input as sent")
    assert_faithful(got[n:-1], second.response["output"], "round 2's items as the upstream sent them")
    assert got[-1] == newest
    assert third.json["include"] == ["reasoning.encrypted_content"]
    check_recall_tools(third.json["tools"], [CLIENT_TOOL])


def test_a_stateless_next_turn_restores_the_hidden_rounds(rclient, rmock):
    """store: false and the full history each turn (Codex's way): the items
    the client saw come back re-serialized; upstream they are replaced by the
    hidden round's items and the last round's, byte for byte as first sent."""
    check_restored(*stateless_two_turns(rclient, rmock, salt=f" [{secrets.token_hex(4)}]"))


def test_restoration_follows_the_items_ids_not_their_text(rclient, rmock):
    """Two conversations alike in every text (the same opening, output, stub
    and model text), each with its own upstream ids: each one's next turn gets
    its own hidden rounds back (another's reasoning items would be refused
    upstream: their encrypted content and ids belong to another response)."""
    salt = f" [{secrets.token_hex(4)}]"
    check_restored(*stateless_two_turns(rclient, rmock, salt))
    rmock.reset()
    first, second, third, newest = stateless_two_turns(rclient, rmock, salt)
    restored = [i.get("id") for i in third.json["input"] if i.get("type") in ("reasoning", "message", "function_call")]
    own = [i["id"] for i in first.response["output"] + second.response["output"]]
    assert set(own) <= set(restored), \
        f"the second conversation's next turn got other items than its own rounds: {restored} (own: {own})"
    check_restored(first, second, third, newest)


@pytest.mark.parametrize("stream", [False, True])
def test_store_false_without_include_still_replays_reasoning(rclient, rproxy, rmock, stream):
    """store: false and no reasoning.encrypted_content asked for: the proxy
    asks for it itself (its recall round must replay round 1's reasoning, and
    a reasoning item without it is refused when nothing is stored)."""
    script = rmock.script = RecallScript()
    body = request(BIG, salt=f" [{secrets.token_hex(4)}]", store=False)
    if stream:
        final = check_client_stream(stream_raw(rproxy, body))
    else:
        final = json.loads(rclient.responses.with_raw_response.create(**body).http_response.content)
    first, second = recall_rounds(rmock)
    assert "reasoning.encrypted_content" in first.json["include"], first.json.get("include")
    [reasoning] = [i for i in second.json["input"] if i.get("type") == "reasoning"]
    assert reasoning["encrypted_content"], reasoning
    check_recall_round(first, second, [RECALL_ID])
    assert script.final_text in texts_of(final)


# --- errors -----------------------------------------------------------------


def failed_stream_checks(raw: bytes, first: mr.Recorded) -> dict:
    final = check_client_stream(raw, terminal="response.failed")
    assert final["id"] == first.response["id"]
    assert final["status"] == "failed", final
    assert isinstance(final["error"], dict) and final["error"].get("message"), final
    return final


@pytest.mark.parametrize("fault", ["status_500", "cut"])
def test_a_round_failing_mid_stream_ends_in_response_failed(rproxy, rmock, fault):
    script = RecallScript()

    def failing(r: mr.Recorded):
        last = mr.last_tool_outputs(r.conversation or [])
        if last and last[-1]["call_id"] == RECALL_ID:
            if fault == "status_500":
                return mr.Reply(status=500, body=mr.error_body("The server had an error.", "server_error"))
            return mr.Reply(output=[mr.message("never finished " * 20)], cut_after=6)
        return script(r)

    rmock.script = failing
    with httpx.Client(trust_env=False, timeout=30) as h:
        resp = h.post(rproxy.url + "/v1/responses", json=request(BIG, stream=True),
                      headers={"authorization": CREDENTIAL})
    assert resp.status_code == 200
    posts = rmock.responses_posts()
    assert len(posts) == 2
    failed_stream_checks(resp.content, posts[0])
    assert RECALLING.encode() in resp.content, "round 1's text was already released"


@pytest.fixture(scope="module")
def unreachable_rproxy(tmp_path_factory):
    p = start_proxy(f"http://127.0.0.1:{free_port()}", tmp_path_factory.mktemp("unreachable-responses"))
    yield p
    stop_proxy(p)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("content", ["plain", "stubbed"])
def test_an_unreachable_upstream_is_a_502_in_openai_format(unreachable_rproxy, content, stream):
    kwargs = request(BIG) if content == "stubbed" else dict(model=MODEL, input="Hello")
    with responses_client(unreachable_rproxy.url + "/v1") as client:
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(**kwargs, stream=stream)
    error = caught.value
    assert error.status_code == 502
    assert error.response.headers["content-type"].startswith("application/json")
    body = error.response.json()
    assert set(body) == {"error"}, body
    assert {"message", "type", "code"} <= set(body["error"]), body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body


RATE_LIMITED = (b'{"error":{"message":"Rate limit reached for gpt-mock-1 in organization org-e2e on tokens per min '
                b'(TPM): Limit 30000, Used 30000, Requested 900. Please try again in 1.8s.",'
                b'"type":"tokens","param":null,"code":"rate_limit_exceeded"}}')


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("content", ["plain", "stubbed"])
def test_an_upstream_429_passes_through_verbatim(rclient, rmock, content, stream):
    kwargs = request(BIG) if content == "stubbed" else dict(model=MODEL, input="Hello")
    rmock.script = lambda r: mr.Reply(status=429, body=RATE_LIMITED, headers=[
        ("retry-after", "2"), ("x-ratelimit-remaining-tokens", "0"), ("x-request-id", "req_429_e2e")])
    with pytest.raises(openai.RateLimitError) as caught:
        rclient.responses.create(**kwargs, stream=stream)
    error = caught.value
    assert error.status_code == 429
    assert error.response.content == RATE_LIMITED
    assert error.response.headers["retry-after"] == "2"
    assert error.response.headers["x-ratelimit-remaining-tokens"] == "0"
    assert error.response.headers["x-request-id"] == "req_429_e2e"
    [up] = rmock.responses_posts()  # max_retries=0: once
    if content == "stubbed":
        check_stub(output_item(up.json)["output"], call_id=CALL_ID, original=BIG, tool_name=TOOL)


def test_stubs_are_idempotent_across_requests(rclient, rmock):
    """The same request twice: byte-identical upstream bodies (refs and stubs
    are pure functions of the output; the prompt cache keeps hitting)."""
    rclient.responses.create(**request(BIG))
    rclient.responses.create(**request(BIG))
    a, b = rmock.responses_posts()
    assert a.body == b.body
    assert ref_of(output_item(a.json)["output"]).startswith("tr_call_BuildLog_42_")
