"""End to end with the official `google-genai` Python SDK, through the real
`toolstub serve` binary, against the mock Gemini upstream: a request with
nothing over budget reaches the upstream byte for byte; a large
functionResponse goes up as a stub, whichever shape the client gave it
(``response.output`` as Gemini CLI writes it, or any object, as the SDK's
automatic function calling writes ``{"result": ...}``); the model's recall
call is answered inside the proxy, streaming and not, and the SDK sees one
answer with no recall part in it; a chat's next turn carries the hidden
exchange restored; countTokens counts the rewritten request; the proxy's
own errors reach the SDK as Google API errors; the usage the upstream
reports, whole and streamed, reaches toolstub's accounting.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.request

import pytest
from google import genai
from google.genai import errors, types

import mock_gemini as mg
from conftest import free_port, start_proxy, stop_proxy
from anthropic_support import STUB_HEADER, check_stub, ordered
from gemini_support import check_recall_round, check_recall_tools, recall_tool, stored

KEY = "AIzaSy-e2e-sdk-key-0123456789"
MODEL = "gemini-2.5-flash"
TOOL = "fetch_report"
RECALLING = "Reading the stored report."


def sig(name: str) -> str:
    return base64.b64encode(f"sig-e2e-{name}".encode()).decode()


# The clients made, kept: a genai.Client closes its HTTP client when it is
# collected, which a call on a temporary (client(url).models...) would race.
_CLIENTS: list[genai.Client] = []


def client(base_url: str) -> genai.Client:
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(
        base_url=base_url, timeout=30_000, client_args={"trust_env": False}))
    _CLIENTS.append(c)
    return c


def report(nonce: str) -> str:
    """~30 KB of text: over toolstub's 20,000-character budget."""
    lines = [f"report {nonce}"] + [f"row {i:05d}: region=eu-west value={i * 7} status=ok" for i in range(600)]
    return "\n".join(lines)


TOOLS = [types.Tool(function_declarations=[types.FunctionDeclaration(
    name=TOOL, description="Fetches the report.",
    parameters_json_schema={"type": "object", "properties": {"id": {"type": "string"}}})])]
# TOOLS as the SDK writes them on the wire (google-genai 3.6 writes this
# one field by its proto name, which the API also reads).
CLIENT_TOOLS_JSON = [{"functionDeclarations": [{"description": "Fetches the report.", "name": TOOL,
                                                "parameters_json_schema": {"type": "object", "properties": {
                                                    "id": {"type": "string"}}}}]}]
CONFIG = types.GenerateContentConfig(
    tools=TOOLS, automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def conversation(output: dict, call_id: str | None = "call_e2e_report") -> list[types.Content]:
    """A user question, the model's call (signed), the tool's answer."""
    fc = types.FunctionCall(name=TOOL, args={"id": "r1"}, id=call_id)
    fr = types.FunctionResponse(name=TOOL, response=output, id=call_id)
    return [
        types.Content(role="user", parts=[types.Part.from_text(text="Summarize the report.")]),
        types.Content(role="model", parts=[types.Part(function_call=fc,
                                                      thought_signature=base64.b64decode(sig("a")))]),
        types.Content(role="user", parts=[types.Part(function_response=fr)]),
    ]


class RecallScript:
    """The model: recalls a stub's start, then answers quoting it."""

    def __init__(self, marker: str, call_id: str | None = "call_e2e_recall"):
        self.marker, self.call_id = marker, call_id
        self.round_b: dict | None = None
        self.final_text: str | None = None

    def __call__(self, r: mg.Recorded):
        last = mg.last_responses(r.json)
        if last and last[0].get("name") == "tool_result_read":
            read = json.loads(mg.output_text(last[0]))
            self.final_text = f"{self.marker} read={read['content'][:60]!r} total_chars={read['total_chars']}"
            return mg.response([mg.text(self.final_text)], response_id="resp_sdk_c",
                               usage={"promptTokenCount": 900, "candidatesTokenCount": 30, "totalTokenCount": 930})
        if last and last[0].get("name") == TOOL:
            output = mg.output_text(last[0])
            ref = mg.stub_ref(output) if output.startswith(STUB_HEADER) else None
            if ref is None:
                return mg.response([mg.text(f"NOT-STUBBED {len(output)}")])
            self.round_b = mg.response(
                [mg.text(RECALLING), mg.call("tool_result_read", {"ref": ref, "offset": 0, "limit": 300},
                                             id=self.call_id, signature=sig("b"))],
                response_id="resp_sdk_b",
                usage={"promptTokenCount": 800, "candidatesTokenCount": 20, "totalTokenCount": 820})
            return self.round_b
        return None


@pytest.fixture(autouse=True)
def _signed(gmock):
    """The conversations here carry a signature the mock did not answer with."""
    gmock.issue(sig("a"))


def stub_of(r: mg.Recorded) -> str:
    [answer] = mg.last_responses(r.json)
    out = answer["response"]
    assert list(out) == ["output"] and isinstance(out["output"], str), out
    return out["output"]


def test_a_request_with_nothing_over_budget_goes_through_byte_for_byte(gmock, gproxy):
    contents = conversation({"output": "small output"})
    direct = client(gmock.url).models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    through = client(gproxy.url).models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert direct.text == through.text == mg.DEFAULT_TEXT
    first, second = gmock.generate_posts()
    assert second.body == first.body, "the proxy forwarded the SDK's bytes unchanged"
    assert second.path == first.path and second.header("x-goog-api-key") == KEY
    assert recall_tool(second.json) is None


def upstream_tokens(url: str, api: str) -> tuple[int, int]:
    """toolstub's `/metrics` count of upstream input and output tokens on `api`."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()

    def part(name: str) -> int:
        series = f'toolstub_upstream_tokens_total{{api="{api}",type="{name}"}} '
        return next((int(float(line[len(series):])) for line in text.splitlines()
                     if line.startswith(series)), 0)

    return part("input"), part("output")


def test_the_usage_of_whole_and_streamed_answers_is_accounted(gmock, tmp_path):
    # A proxy of its own: another test's usage, filed moments after its
    # answer, is not counted here.
    proxy = start_proxy(gmock.url, tmp_path)
    try:
        contents = conversation({"output": "small output"})
        client(proxy.url).models.generate_content(model=MODEL, contents=contents, config=CONFIG)
        for _ in client(proxy.url).models.generate_content_stream(
                model=MODEL, contents=contents, config=CONFIG):
            pass
        usage = mg.USAGE["promptTokenCount"], mg.USAGE["candidatesTokenCount"]
        apis = ["generate_content", "stream_generate_content"]
        # The ledger files usage off the request's path, moments later.
        deadline = time.monotonic() + 30
        while True:
            seen = {api: upstream_tokens(proxy.url, api) for api in apis}
            if all(seen[a] == usage for a in apis) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert seen == {api: usage for api in apis}, seen
        # Each answer once: nothing more lands after.
        time.sleep(0.5)
        assert {api: upstream_tokens(proxy.url, api) for api in apis} == seen
    finally:
        stop_proxy(proxy)


@pytest.mark.parametrize("shape", ["output", "result"])
def test_a_large_function_response_is_stubbed_and_recalled(gmock, gproxy, shape):
    nonce = secrets.token_hex(8)
    text = report(nonce)
    script = gmock.script = RecallScript(f"SDK-DONE-{nonce[:6]}")
    resp = client(gproxy.url).models.generate_content(
        model=MODEL, contents=conversation({shape: text}), config=CONFIG)
    assert resp.text == script.final_text and nonce in resp.text, resp
    assert not resp.function_calls, "no recall part reaches the client"
    # Usage summed over the proxy's two rounds.
    assert resp.usage_metadata.prompt_token_count == 800 + 900
    assert resp.usage_metadata.candidates_token_count == 20 + 30

    round_b, round_c = gmock.generate_posts()
    stub = stub_of(round_b)
    original = stored(gproxy, mg.stub_ref(stub), KEY)
    # Gemini CLI's response.output is the text itself; any other object is
    # stored as the JSON the client wrote and becomes {"output": stub}.
    if shape == "output":
        assert original == text
    else:
        assert json.loads(original) == {shape: text}, original[:80]
    check_stub(stub, call_id="call_e2e_report", original=original, tool_name=TOOL)
    sent = round_b.json["contents"]
    assert sent[1]["parts"][0]["thoughtSignature"] == sig("a"), "the model part's signature untouched"
    check_recall_tools(round_b.json, CLIENT_TOOLS_JSON, key_order=False)
    [result] = check_recall_round(round_b, round_c, script.round_b["candidates"][0]["content"]["parts"],
                                  ["call_e2e_recall"])
    assert result["content"] == original[:300] and result["total_chars"] == len(original)


def test_a_streamed_recall_round_is_answered_inside_the_proxy(gmock, gproxy):
    nonce = secrets.token_hex(8)
    script = gmock.script = RecallScript(f"SDK-STREAM-{nonce[:6]}", call_id=None)
    chunks = list(client(gproxy.url).models.generate_content_stream(
        model=MODEL, contents=conversation({"output": report(nonce)}), config=CONFIG))
    text = "".join(c.text or "" for c in chunks)
    assert text == RECALLING + script.final_text, text
    assert not any(c.function_calls for c in chunks), "no recall part reaches the client"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.prompt_token_count == 800 + 900
    round_b, round_c = gmock.generate_posts()
    assert all(r.action == "streamGenerateContent" for r in (round_b, round_c))
    streamed = [p for e in mg.sse_events(script.round_b) for p in e["candidates"][0]["content"]["parts"]]
    [result] = check_recall_round(round_b, round_c, streamed, [None])
    assert nonce in result["content"]


def test_a_chats_next_turn_carries_the_hidden_exchange_restored(gmock, gproxy):
    """The SDK's chat keeps the answer it saw; the proxy puts the hidden
    rounds back in its place on the next turn, the stub unchanged."""
    nonce = secrets.token_hex(8)
    script = RecallScript(f"SDK-CHAT-{nonce[:6]}")

    def chat_script(r: mg.Recorded):
        if mg.user_texts(r.json)[-1:] == ["And now?"]:
            return mg.response([mg.text("CHAT-TURN-2 done")])
        return script(r)

    gmock.script = chat_script
    history = conversation({"output": report(nonce)})
    chat = client(gproxy.url).chats.create(model=MODEL, config=CONFIG, history=history[:2])
    first = chat.send_message(history[2].parts)
    assert first.text == script.final_text
    second = chat.send_message("And now?")
    assert second.text == "CHAT-TURN-2 done"
    round_b, round_c, turn2 = gmock.generate_posts()
    cs = turn2.json["contents"]
    n = len(round_b.json["contents"])
    assert ordered(cs[:n]) == ordered(round_b.json["contents"]), "the stub and all before it sent again unchanged"
    assert ordered(cs[n:n + 3]) == ordered(round_c.json["contents"][n:] + [
        {"role": "model", "parts": [mg.text(script.final_text)]}]), "the hidden exchange restored as sent"
    assert cs[n]["parts"][1]["functionCall"]["name"] == "tool_result_read", "the recall call restored"
    assert cs[n + 3]["role"] == "user" and cs[n + 3]["parts"][0]["text"] == "And now?"
    assert len(cs) == n + 4


def test_count_tokens_counts_the_rewritten_request(gmock, gproxy):
    contents = conversation({"output": report(secrets.token_hex(8))})
    direct = client(gmock.url).models.count_tokens(model=MODEL, contents=contents)
    through = client(gproxy.url).models.count_tokens(model=MODEL, contents=contents)
    # The mock counts a quarter of the body's bytes: the stubbed body is smaller.
    assert through.total_tokens < direct.total_tokens // 3, (through, direct)
    stubbed = gmock.requests()[-1]
    assert stubbed.action == "countTokens" and STUB_HEADER.encode() in stubbed.body


def test_errors_reach_the_sdk_as_google_api_errors(gmock, gproxy, tmp_path):
    """An upstream's refusal comes back as it was; the proxy's own failure
    (its upstream unreachable) answers in Google's error format, which the
    SDK raises as an API error with the code and status."""
    gmock.script = lambda r: mg.Reply(status=429, body=mg.error_body(429, "RESOURCE_EXHAUSTED", "quota"))
    with pytest.raises(errors.ClientError) as e:
        client(gproxy.url).models.generate_content(model=MODEL, contents="hi")
    assert e.value.code == 429 and e.value.status == "RESOURCE_EXHAUSTED"

    dead = start_proxy(f"http://127.0.0.1:{free_port()}", tmp_path)
    try:
        with pytest.raises(errors.ServerError) as e:
            client(dead.url).models.generate_content(model=MODEL, contents="hi")
        assert e.value.code == 502 and e.value.status == "UNAVAILABLE", (e.value.code, e.value.status)
        assert e.value.message and KEY not in str(e.value)
    finally:
        stop_proxy(dead)


def test_a_streamed_chats_next_turn_is_restored_too(gmock, gproxy):
    """The SDK's chat keeps a streamed answer as one model content per
    event; the proxy takes that run as the one answer it was and restores
    the hidden exchange in its place."""
    nonce = secrets.token_hex(8)
    script = RecallScript(f"SDK-SCHAT-{nonce[:6]}", call_id=None)

    def chat_script(r: mg.Recorded):
        if mg.user_texts(r.json)[-1:] == ["And now?"]:
            return mg.response([mg.text("CHAT-TURN-2 done")])
        return script(r)

    gmock.script = chat_script
    history = conversation({"output": report(nonce)})
    chat = client(gproxy.url).chats.create(model=MODEL, config=CONFIG, history=history[:2])
    first = "".join(c.text or "" for c in chat.send_message_stream(history[2].parts))
    assert first == RECALLING + script.final_text
    second = "".join(c.text or "" for c in chat.send_message_stream("And now?"))
    assert second == "CHAT-TURN-2 done"
    round_b, round_c, turn2 = gmock.generate_posts()
    cs = turn2.json["contents"]
    n = len(round_b.json["contents"])
    assert ordered(cs[:n]) == ordered(round_b.json["contents"]), "the stub and all before it sent again unchanged"
    final = mg.response([mg.text(script.final_text)])
    streamed = [p for e in mg.sse_events(final) for p in e["candidates"][0]["content"]["parts"]]
    assert ordered(cs[n:n + 3]) == ordered(round_c.json["contents"][n:] + [{"role": "model", "parts": streamed}]), \
        [c["role"] for c in cs[n:]]
    assert cs[n + 3] == {"role": "user", "parts": [{"text": "And now?"}]} and len(cs) == n + 4
