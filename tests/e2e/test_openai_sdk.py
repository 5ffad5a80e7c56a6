"""End-to-end: the official `openai` Python SDK talks to the real
`toolstub serve` binary, which talks to a mock upstream that records what it
received. Each test checks both sides: what the SDK got back, and what the
upstream was sent.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import threading

import pytest

import mock_upstream as m
from conftest import API_KEY, start_proxy, stop_proxy

STUB_HEADER = "[toolstub: tool output externalized]"
RECALL_TOOLS = ["tool_result_read", "tool_result_search", "tool_result_list"]
CALL_ID = "call_weather_1"
TOOL_NAME = "get_station_readings"
# Hop-by-hop headers and Host are the only request headers not forwarded.
NOT_FORWARDED = {"host", "connection", "keep-alive", "proxy-connection", "te", "trailer",
                 "transfer-encoding", "upgrade", "proxy-authorization", "proxy-authenticate"}

# The client's one tool. Keys deliberately not in sorted order: the proxy must
# not re-order them (they reach the model's prompt).
CLIENT_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Current readings of the weather stations of a region.",
        "parameters": {
            "type": "object",
            "required": ["region"],
            "properties": {
                "region": {"type": "string", "description": "Region code, or 'all'."},
                "limit": {"type": "integer", "minimum": 1},
            },
            "additionalProperties": False,
        },
    },
}


def big_json_document() -> str:
    """A ~300 KB JSON tool output, with some non-ASCII text (lengths are
    counted in code points)."""
    cities = ["Zürich", "東京", "São Paulo", "Kraków", "Reykjavík", "Oslo"]
    stations = [
        {
            "id": i,
            "name": f"station {i}",
            "city": cities[i % len(cities)],
            "lat": round(-60 + (i * 0.037) % 120, 4),
            "lon": round(-170 + (i * 0.113) % 340, 4),
            "temp_c": round(-5 + (i * 7 % 400) / 10, 1),
            "wind": {"speed_ms": (i * 3) % 25, "dir": ["N", "E", "S", "W"][i % 4]},
            "ok": i % 17 != 0,
        }
        for i in range(1650)
    ]
    doc = json.dumps({"generated_at": "2024-05-01T12:00:00Z", "count": len(stations), "stations": stations},
                     ensure_ascii=False, indent=1)
    assert 250_000 < len(doc.encode()) < 400_000, len(doc.encode())
    return doc


BIG = big_json_document()


def conversation(tool_output: str) -> list[dict]:
    return [
        {"role": "user", "content": "Summarise today's station readings."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": CALL_ID,
                    "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": json.dumps({"region": "all"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": CALL_ID, "content": tool_output},
    ]


def expected_ref(call_id: str, text: str) -> tuple[str, str]:
    sha16 = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"tr_{call_id}_{sha16}", sha16


def tenant_of(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()[:16]


def ordered(value) -> str:
    """A JSON rendering that keeps key order, so == also compares key order."""
    return json.dumps(value, ensure_ascii=False)


def chat_posts(mock) -> list[m.Recorded]:
    return [r for r in mock.requests() if r.method == "POST" and r.path.endswith("/chat/completions")]


def assert_rewritten(upstream: m.Recorded, sdk_body: dict, original: str) -> str:
    """Checks the upstream body against what the SDK sent: only the tool
    message's content changed (to a stub) and the recall tools were appended.
    Returns the stub."""
    got = upstream.json
    assert isinstance(got, dict), upstream.body[:200]
    assert upstream.header("content-length") == str(len(upstream.body))
    assert len(upstream.body) < len(ordered(sdk_body).encode()) // 10

    stub = got["messages"][2]["content"]
    ref, sha16 = expected_ref(CALL_ID, original)
    lines = stub.split("\n")
    assert lines[0] == STUB_HEADER, stub[:300]
    for line in [f"tool_name: {TOOL_NAME}", "kind: json", f"original_chars: {len(original)}",
                 f"ref: {ref}", f"sha256: {sha16}", "reason: single_threshold"]:
        assert line in lines, f"{line!r} missing from the stub:\n{stub}"
    assert f"Use tool_result_read with ref={ref}" in stub
    assert len(stub) < 10_000, len(stub)

    # Everything else as the SDK sent it, key order included.
    assert [t["function"]["name"] for t in got["tools"]] == [TOOL_NAME] + RECALL_TOOLS
    for tool in got["tools"][1:]:
        assert tool["type"] == "function"
        assert tool["function"]["parameters"]["type"] == "object"
    assert "ref" in got["tools"][1]["function"]["parameters"]["properties"]
    restored = json.loads(upstream.body)
    restored["messages"][2]["content"] = original
    restored["tools"] = restored["tools"][:1]
    assert ordered(restored) == ordered(sdk_body)
    return stub


def test_non_streaming_chat_with_a_large_tool_output(client, sent, mock, proxy):
    messages = conversation(BIG)
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, tools=[CLIENT_TOOL], temperature=0.2, tool_choice="auto",
    )

    # What the SDK got: the mock's answer, parsed into its types.
    assert completion.id == m.COMPLETION_ID
    assert completion.model == m.MODEL
    assert completion.choices[0].message.content == m.COMPLETION_TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == m.USAGE["prompt_tokens"]
    assert completion.usage.completion_tokens == m.USAGE["completion_tokens"]
    assert completion.usage.total_tokens == m.USAGE["total_tokens"]

    # What the upstream got.
    sdk_request = sent.last()
    sdk_body = json.loads(sdk_request.content)
    assert sdk_body["messages"][2]["content"] == BIG  # the SDK sent the original
    [upstream] = chat_posts(mock)
    assert upstream.path == "/v1/chat/completions"
    assert upstream.header("authorization") == f"Bearer {API_KEY}"
    assert upstream.json["messages"][:2] == messages[:2]
    stub = assert_rewritten(upstream, sdk_body, BIG)

    # The same request again, through with_raw_response for the headers: the
    # toolstub headers are there, and the upstream body is byte-identical to
    # the first one (idempotent refs, stable prompt prefix).
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=[CLIENT_TOOL], temperature=0.2, tool_choice="auto",
    )
    assert raw.status_code == 200
    assert raw.headers["x-toolstub-externalized"] == "1"
    assert int(raw.headers["x-toolstub-saved-chars"]) > 200_000
    assert raw.headers["x-request-id"] == "req_mock_1"  # upstream headers pass through
    assert raw.parse().choices[0].message.content == m.COMPLETION_TEXT
    first, second = chat_posts(mock)
    assert second.body == first.body

    # The original is in the store, under the caller's tenant only.
    ref, _ = expected_ref(CALL_ID, BIG)
    read = subprocess.run(
        [str(proxy.binary), "results", "read", "--db", str(proxy.db), "--ref", ref,
         "--tenant", tenant_of(f"Bearer {API_KEY}"), "--limit", "-1", "--json"],
        capture_output=True, text=True, timeout=20,
    )
    assert read.returncode == 0, read.stderr
    stored = json.loads(read.stdout)
    assert stored["content"] == BIG
    assert stored["total_chars"] == len(BIG)
    assert stored["has_more"] is False
    other = subprocess.run(
        [str(proxy.binary), "results", "read", "--db", str(proxy.db), "--ref", ref, "--tenant", "anonymous"],
        capture_output=True, text=True, timeout=20,
    )
    assert other.returncode != 0, "another tenant must not read the ref"
    assert BIG[:1000] not in other.stdout
    assert ref in stub


def test_streaming_chat_with_a_large_tool_output(client, sent, mock):
    gate = threading.Event()
    mock.stream_gate = gate  # the mock holds the stream after its first chunk
    messages = conversation(BIG)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=[CLIENT_TOOL], stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-toolstub-externalized"] == "1"

    chunks = []
    for chunk in raw.parse():
        chunks.append(chunk)
        gate.set()  # release the rest only once the first chunk got here
    # The first chunk reached the SDK while the upstream was still holding the
    # rest: the proxy streamed instead of buffering.
    assert mock.gate_opened is True

    assert len(chunks) == len(m.stream_events())
    assert all(c.id == m.STREAM_ID and c.object == "chat.completion.chunk" for c in chunks)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == m.STREAM_PIECES
    assert "".join(deltas) == "".join(m.STREAM_PIECES)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == m.USAGE["total_tokens"]

    sdk_body = json.loads(sent.last().content)
    assert sdk_body["stream"] is True
    [upstream] = chat_posts(mock)
    assert upstream.json["stream"] is True
    assert upstream.json["stream_options"] == {"include_usage": True}
    assert upstream.header("authorization") == f"Bearer {API_KEY}"
    assert_rewritten(upstream, sdk_body, BIG)


@pytest.mark.parametrize("shape", ["plain", "small_tool_output"])
def test_a_request_without_large_output_arrives_byte_identical(client, sent, mock, shape):
    if shape == "plain":
        kwargs = dict(messages=[{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hello, naïve café ☕"}])
    else:
        small = json.dumps({"stations": [{"id": i, "temp_c": i / 2} for i in range(200)]})
        assert 4_000 < len(small) < 20_000  # under the 20000-char threshold
        kwargs = dict(messages=conversation(small), tools=[CLIENT_TOOL])
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", max_completion_tokens=50, seed=7, **kwargs)
    assert raw.status_code == 200
    assert "x-toolstub-externalized" not in raw.headers
    assert raw.parse().choices[0].message.content == m.COMPLETION_TEXT

    sdk_request = sent.last()
    [upstream] = chat_posts(mock)
    assert upstream.body == sdk_request.content  # byte for byte
    assert upstream.header("content-length") == str(len(sdk_request.content))
    if shape == "plain":
        assert "tools" not in upstream.json
    else:
        assert [t["function"]["name"] for t in upstream.json["tools"]] == [TOOL_NAME]
    # Every end-to-end request header the SDK sent arrived unchanged.
    sdk_headers = [(k.decode().lower(), v.decode()) for k, v in sdk_request.headers.raw]
    for name, value in sdk_headers:
        if name not in NOT_FORWARDED:
            assert upstream.header(name) == value, name
    assert upstream.header("authorization") == f"Bearer {API_KEY}"
    assert not any(name.startswith("x-toolstub-") for name in upstream.header_names())


def test_models_list_passes_through(client, idle_client, mock):
    page = client.models.list()
    assert [model.id for model in page.data] == [x["id"] for x in m.MODELS["data"]]
    assert page.data[0].owned_by == "mock"
    [upstream] = mock.requests()
    assert (upstream.method, upstream.path, upstream.body) == ("GET", "/v1/models", b"")
    assert upstream.header("authorization") == f"Bearer {API_KEY}"

    # The never-closed client leaves a pooled keep-alive connection open until
    # the proxy's SIGTERM at the end of the session.
    assert [model.id for model in idle_client.models.list().data][0] == m.MODEL


def test_sigterm_lets_a_stream_in_flight_finish(mock, tmp_path):
    """A second proxy process: SIGTERM arrives while a streamed answer is
    half-way; the stream still completes, then the process exits 0."""
    import openai

    proxy = start_proxy(mock.url, tmp_path)
    try:
        gate = threading.Event()
        mock.stream_gate = gate
        with openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20.0,
                           http_client=openai.DefaultHttpxClient(trust_env=False)) as client:
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=conversation(BIG), tools=[CLIENT_TOOL], stream=True)
            it = iter(stream)
            first = next(it)
            assert first.id == m.STREAM_ID
            proxy.process.send_signal(signal.SIGTERM)  # with the response in flight
            gate.set()
            rest = list(it)
        assert 1 + len(rest) == len(m.stream_events())  # not cut short
        pieces = [c.choices[0].delta.content for c in [first, *rest] if c.choices and c.choices[0].delta.content]
        assert "".join(pieces) == "".join(m.STREAM_PIECES)
        code = stop_proxy(proxy)
        assert code == 0, f"exit code {code}:\n{proxy.log_tail()}"
    finally:
        if proxy.process.poll() is None:
            proxy.process.kill()
            proxy.process.wait()


def test_streaming_with_a_recall_round_in_the_middle(client, mock):
    """The model calls tool_result_read in the middle of a streamed answer:
    the proxy answers it from the store and splices round 2 into the same
    stream. The SDK sees one ordinary stream, no recall call, one id."""
    mock.recall_mode = True
    stream = client.chat.completions.create(
        model=m.MODEL,
        messages=conversation(BIG),
        tools=[CLIENT_TOOL],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check. It begins with " + json.dumps(BIG[:12])
    assert all(c.id == m.STREAM_ID for c in chunks), {c.id for c in chunks}
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    rounds = [r for r in mock.requests() if r.path.endswith("/chat/completions")]
    assert len(rounds) == 2
    second = rounds[1].json["messages"]
    assert second[-2]["role"] == "assistant"
    assert second[-2]["tool_calls"][0]["function"]["name"] == "tool_result_read"
    assert second[-1]["tool_call_id"] == m.RECALL_CALL_ID
    read = json.loads(second[-1]["content"])
    assert read["content"] == BIG[:12] and read["offset"] == 0 and read["has_more"] is True
