"""A mock OpenAI-compatible upstream in pure Python (standard library only).

It listens on 127.0.0.1, port 0 (the kernel picks a free one), records every
request it receives (method, path, headers, raw body bytes, parsed JSON) and
answers:

- ``GET /v1/models``: a models list;
- ``POST .../chat/completions``: a ``chat.completion`` JSON, or, when the
  request has ``"stream": true``, a server-sent-event stream of
  ``chat.completion.chunk`` events ending with ``data: [DONE]``, written and
  flushed one event at a time (chunked transfer encoding, HTTP/1.1);
- anything else: a 404 in the OpenAI error format.

A test can set ``stream_gate`` to a ``threading.Event``: the mock then sends
the first chunk of the next stream, waits (at most ``GATE_TIMEOUT`` seconds)
until the test sets the event, and records in ``gate_opened`` whether it was
set in time. A client that received the first chunk before the upstream sent
the second proves the proxy streams instead of buffering.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import mock_http

GATE_TIMEOUT = 5.0

COMPLETION_ID = "chatcmpl-e2e-mock-1"
STREAM_ID = "chatcmpl-e2e-mock-stream-1"
MODEL = "mock-model"
COMPLETION_TEXT = "The forecast JSON lists 3000 stations; station 0 reports 12.5 C."
# The streamed answer, one content delta per chunk.
STREAM_PIECES = ["Station ", "0 ", "reports ", "12.5 C ", "and ", "light ", "wind."]
USAGE = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}


@dataclass
class Recorded:
    method: str
    path: str
    headers: list[tuple[str, str]]  # (lower-cased name, value), in order
    body: bytes
    json: Any = None

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[0] if values else None

    def header_names(self) -> set[str]:
        return {k for k, _ in self.headers}


@dataclass
class MockUpstream:
    server: ThreadingHTTPServer
    thread: threading.Thread
    received: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stream_gate: threading.Event | None = None
    gate_opened: bool | None = None
    # When set, a streamed request that offers the recall tools is answered
    # with a recall call (tool_result_read on the first stub's ref) first.
    recall_mode: bool = False

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, r: Recorded) -> None:
        with self.lock:
            self.received.append(r)

    def requests(self) -> list[Recorded]:
        with self.lock:
            return list(self.received)

    def reset(self) -> None:
        with self.lock:
            self.received.clear()
        self.stream_gate = None
        self.gate_opened = None
        self.recall_mode = False

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def completion_body() -> dict:
    return {
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": COMPLETION_TEXT, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
        "system_fingerprint": "fp_mock",
    }


RECALL_CALL_ID = "rc_e2e_1"


def first_stub_ref(request: dict) -> str | None:
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            for line in content.splitlines():
                if line.startswith("ref: "):
                    return line[len("ref: "):]
    return None


def recall_round_events(request: dict) -> list[dict] | None:
    """The streamed answer in recall mode: round 1 calls tool_result_read;
    round 2 (after the proxy appended the result) quotes what it read."""
    messages = request.get("messages", [])
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" and last.get("tool_call_id") == RECALL_CALL_ID:
        read = json.loads(last["content"])
        return [
            stream_chunk({"role": "assistant", "content": ""}, stream_id="chatcmpl-round-2"),
            stream_chunk({"content": "It begins with "}, stream_id="chatcmpl-round-2"),
            stream_chunk({"content": json.dumps(read["content"])}, stream_id="chatcmpl-round-2"),
            stream_chunk({}, "stop", stream_id="chatcmpl-round-2"),
        ]
    offered = [t.get("function", {}).get("name") for t in request.get("tools", [])]
    ref = first_stub_ref(request)
    if "tool_result_read" not in offered or ref is None:
        return None
    arguments = json.dumps({"ref": ref, "offset": 0, "limit": 12})
    call = {"index": 0, "id": RECALL_CALL_ID, "type": "function",
            "function": {"name": "tool_result_read", "arguments": arguments[:10]}}
    more = {"index": 0, "function": {"arguments": arguments[10:]}}
    return [
        stream_chunk({"role": "assistant", "content": ""}),
        stream_chunk({"content": "Let me check. "}),
        stream_chunk({"tool_calls": [call]}),
        stream_chunk({"tool_calls": [more]}),
        stream_chunk({}, "tool_calls"),
    ]


def stream_chunk(delta: dict, finish: str | None = None, stream_id: str = STREAM_ID) -> dict:
    return {
        "id": stream_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def stream_events() -> list[dict]:
    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": STREAM_ID,
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in STREAM_PIECES]
    events.append(chunk({}, "stop"))
    usage = chunk({})
    usage["choices"] = []
    usage["usage"] = USAGE
    events.append(usage)
    return events


MODELS = {
    "object": "list",
    "data": [
        {"id": MODEL, "object": "model", "created": 1700000000, "owned_by": "mock"},
        {"id": "mock-model-mini", "object": "model", "created": 1700000001, "owned_by": "mock"},
    ],
}


def start() -> MockUpstream:
    mock: MockUpstream

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked responses

        def log_message(self, *_args: Any) -> None:  # quiet
            pass

        def _read_body(self) -> bytes:
            return mock_http.read_body(self)

        def _record(self) -> Recorded:
            body = self._read_body()
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            r = Recorded(
                method=self.command,
                path=self.path,
                headers=[(k.lower(), v) for k, v in self.headers.items()],
                body=body,
                json=parsed,
            )
            mock.record(r)
            return r

        def _json(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", "req_mock_1")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _stream(self, request: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            gate = mock.stream_gate
            events = (recall_round_events(request) if mock.recall_mode else None) or stream_events()
            for i, event in enumerate(events):
                self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
                if i == 0 and gate is not None:
                    mock.gate_opened = gate.wait(GATE_TIMEOUT)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")  # the terminating zero-length chunk

        def do_GET(self) -> None:
            r = self._record()
            if r.path.split("?")[0] == "/v1/models":
                self._json(200, MODELS)
            else:
                self._not_found()

        def do_POST(self) -> None:
            r = self._record()
            if r.path.split("?")[0].endswith("/chat/completions"):
                if isinstance(r.json, dict) and r.json.get("stream") is True:
                    self._stream(r.json)
                else:
                    self._json(200, completion_body())
            else:
                self._not_found()

        def _not_found(self) -> None:
            self._json(
                404,
                {"error": {"message": f"no route {self.path}", "type": "invalid_request_error", "code": None}},
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mock-upstream", daemon=True)
    mock = MockUpstream(server=server, thread=thread)
    thread.start()
    return mock
