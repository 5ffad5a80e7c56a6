"""A mock Anthropic Messages upstream in pure Python (standard library only).

It listens on 127.0.0.1, port 0 (the kernel picks a free one), records every
request it receives (method, path and query, headers, raw body bytes, parsed
JSON) and answers:

- ``POST /v1/messages`` (any prefix, any query such as ``?beta=true``): a
  message JSON, or, when the request has ``"stream": true``, the message as a
  server-sent-event stream exactly as Anthropic sends it (``event: <type>``
  and ``data: <json>`` lines, a blank line after each event): message_start
  (``content: []`` and the full usage), ``ping``, per block
  content_block_start / content_block_delta / content_block_stop with its
  ``index`` (``text_delta``; ``thinking_delta`` then ``signature_delta``;
  ``input_json_delta`` whose first ``partial_json`` is ""), message_delta
  (stop_reason, cumulative usage), message_stop. Each event is written and
  flushed on its own (chunked transfer encoding, HTTP/1.1).
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``.
- Claude on Bedrock: ``POST .../model/{id}/invoke`` (a message JSON) and
  ``/invoke-with-response-stream`` (the events in Bedrock's binary frames,
  ``bedrock_wire.py``), each checked for a valid SigV4 signature when
  ``aws_credentials`` is set (a 403 as AWS answers, else); ``GET
  /inference-profiles``: none.
- ``HEAD``/``GET`` of anything else, and other POSTs: a 404 in the Anthropic
  error format (recorded like the rest, so a test sees what a client tried).

What a ``/v1/messages`` request gets is decided by ``MockAnthropic.script``, a
function of the recorded request returning a ``Reply`` (or a bare message
dict), or None for the default answer (a short text). Tests script by the
request's content (the last user message, the tools offered, a tool_result's
id), never by counting calls, so side calls a client makes in between do not
shift the script.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import bedrock_wire
import mock_http

GATE_TIMEOUT = 10.0
MODEL = "claude-mock-1"
DEFAULT_TEXT = "Mock reply."
# The usage every message carries unless a reply sets its own.
USAGE = {"input_tokens": 321, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 17}


@dataclass
class Recorded:
    method: str
    path: str  # with the query
    headers: list[tuple[str, str]]  # (lower-cased name, value), in order
    body: bytes
    json: Any = None
    time: float = 0.0
    status: int | None = None  # what the mock answered (set once it has)

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[0] if values else None

    def header_names(self) -> set[str]:
        return {k for k, _ in self.headers}

    @property
    def route(self) -> str:
        return self.path.split("?")[0]

    def is_vertex(self) -> bool:
        """Claude on Vertex AI: ``.../publishers/anthropic/models/{m}:rawPredict``."""
        return "/publishers/anthropic/models/" in self.route

    def is_bedrock(self) -> bool:
        """Claude on Bedrock: ``.../model/{id}/invoke`` and ``/invoke-with-response-stream``."""
        return "/model/" in self.route and self.route.endswith(("/invoke", "/invoke-with-response-stream"))

    def is_messages(self) -> bool:
        return self.method == "POST" and (
            self.route.endswith("/v1/messages") or self.is_bedrock()
            or (self.is_vertex() and not self.is_count_tokens()
                and self.route.endswith((":rawPredict", ":streamRawPredict"))))

    def is_count_tokens(self) -> bool:
        return self.method == "POST" and (self.route.endswith("/v1/messages/count_tokens")
                                          or self.route.endswith("/models/count-tokens:rawPredict"))

    def streams(self) -> bool:
        if self.is_bedrock():
            return self.route.endswith("/invoke-with-response-stream")
        return isinstance(self.json, dict) and self.json.get("stream") is True


@dataclass
class Reply:
    """One answer. ``message`` is sent as JSON, or as SSE when the request
    streams (``stream`` forces either). ``status``/``body`` make an error reply."""

    message: dict | None = None
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: Any = None  # an error reply's JSON value (or bytes, sent as they are)
    stream: bool | None = None
    # Extra events, each (before_event_index, type, data), for ping and friends.
    extra_events: list[tuple[int, str, dict]] = field(default_factory=list)
    delay: float = 0.0  # seconds to wait before answering
    # When set, the mock waits (at most GATE_TIMEOUT s) for the test to set
    # this event before it answers, and appends whether it was set in time to
    # MockAnthropic.gates. A client that receives round 1's text before the
    # gate opens proves the proxy streamed round 1 instead of holding it.
    gate: threading.Event | None = None


def message(content: list[dict], stop_reason: str = "end_turn", *, id: str = "msg_mock_1",
            usage: dict | None = None, model: str = MODEL) -> dict:
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage or USAGE),
    }


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def thinking(t: str, signature: str) -> dict:
    return {"type": "thinking", "thinking": t, "signature": signature}


def tool_use(id: str, name: str, input: dict) -> dict:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def _pieces(s: str, n: int) -> list[str]:
    """s cut into at most n non-empty pieces (one empty piece for "")."""
    if not s:
        return [""]
    size = max(1, -(-len(s) // n))
    return [s[i:i + size] for i in range(0, len(s), size)]


def sse_events(msg: dict, pieces: int = 3) -> list[tuple[str, dict]]:
    """The events Anthropic streams for ``msg``."""
    start = dict(msg)
    start["content"] = []
    start["stop_reason"] = None
    start["stop_sequence"] = None
    usage = dict(msg["usage"])
    start_usage = dict(usage)
    start_usage["output_tokens"] = min(1, usage.get("output_tokens", 0))
    start["usage"] = start_usage
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start}),
                                      ("ping", {"type": "ping"})]
    for index, block in enumerate(msg["content"]):
        kind = block["type"]
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], pieces)]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], pieces)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "redacted_thinking":
            first, deltas = dict(block), []
        elif kind in ("tool_use", "server_tool_use"):
            first = {"type": kind, "id": block["id"], "name": block["name"], "input": {}}
            encoded = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in _pieces(encoded, pieces)]
        else:
            raise ValueError(f"no stream shape for block type {kind}")
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        for d in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": msg.get("stop_sequence")},
        "usage": usage,
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


def error_body(kind: str, message_text: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message_text}}


# --- reading requests ------------------------------------------------------

def blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_result_text(block: dict) -> str:
    """The text of a tool_result block: its string content, or its text blocks joined."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def tool_results(body: dict) -> list[dict]:
    """Every tool_result block of the request's user messages, in order."""
    out = []
    for m in body.get("messages", []):
        if m.get("role") == "user":
            out += [b for b in blocks(m.get("content")) if b.get("type") == "tool_result"]
    return out


def last_tool_results(body: dict) -> list[dict]:
    """The tool_result blocks of the last message, when it is a user message."""
    msgs = body.get("messages") or []
    if not msgs or msgs[-1].get("role") != "user":
        return []
    return [b for b in blocks(msgs[-1].get("content")) if b.get("type") == "tool_result"]


def user_texts(body: dict) -> list[str]:
    out = []
    for m in body.get("messages", []):
        if m.get("role") == "user":
            out += [b.get("text", "") for b in blocks(m.get("content")) if b.get("type") == "text"]
    return out


def tool_names(body: dict) -> list[str]:
    return [t.get("name") for t in body.get("tools") or []]


def stub_ref(text_: str) -> str | None:
    for line in text_.splitlines():
        if line.startswith("ref: "):
            return line[len("ref: "):].strip()
    return None


Script = Callable[[Recorded], "Reply | dict | None"]


def default_reply(r: Recorded) -> Reply:
    return Reply(message=message([text(DEFAULT_TEXT)]))


def count_tokens_of(r: Recorded) -> int:
    """A deterministic stand-in for a token count: a quarter of the body's bytes."""
    return max(1, len(r.body) // 4)


@dataclass
class MockAnthropic:
    server: ThreadingHTTPServer
    thread: threading.Thread
    received: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    script: Script | None = None
    # Raised in the handler thread by a script: kept for the test to re-raise.
    errors: list[str] = field(default_factory=list)
    gates: list[bool] = field(default_factory=list)
    # (access key, secret key): Bedrock requests must carry a valid SigV4
    # signature by it, as AWS requires, else a 403 as AWS answers.
    aws_credentials: tuple[str, str] | None = None

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

    def messages_posts(self) -> list[Recorded]:
        return [r for r in self.requests() if r.is_messages()]

    def count_tokens_posts(self) -> list[Recorded]:
        return [r for r in self.requests() if r.is_count_tokens()]

    def reset(self) -> None:
        with self.lock:
            self.received.clear()
            self.errors.clear()
            self.gates.clear()
        self.script = None
        self.aws_credentials = None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start() -> MockAnthropic:
    mock: MockAnthropic

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
            r = Recorded(method=self.command, path=self.path,
                         headers=[(k.lower(), v) for k, v in self.headers.items()],
                         body=body, json=parsed, time=time.time())
            mock.record(r)
            self.recorded = r
            return r

        def _send(self, status: int, value: Any, headers: list[tuple[str, str]] = (), head_only: bool = False) -> None:
            self.recorded.status = status
            data = value if isinstance(value, bytes) else json.dumps(value).encode()
            self.send_response(status)
            names = {k.lower() for k, _ in headers}
            if "content-type" not in names:
                self.send_header("Content-Type", "application/json")
            if "request-id" not in names:
                self.send_header("request-id", "req_mock_anthropic_1")
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head_only:
                self.wfile.write(data)
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _bedrock_stream(self, reply: Reply) -> None:
            self.recorded.status = 200
            self.send_response(200)
            self.send_header("Content-Type", bedrock_wire.CONTENT_TYPE)
            self.send_header("x-amzn-RequestId", "req-mock-bedrock-1")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _kind, data in sse_events(reply.message):
                if data.get("type") == "message_stop":
                    data = dict(data)
                    data["amazon-bedrock-invocationMetrics"] = {"inputTokenCount": 321, "outputTokenCount": 17}
                self._chunk(bedrock_wire.chunk(data))
            self._chunk(b"")

        def _stream(self, reply: Reply) -> None:
            if self.recorded.is_bedrock():
                return self._bedrock_stream(reply)
            self.recorded.status = 200
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("request-id", "req_mock_anthropic_stream_1")
            for k, v in reply.headers:
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = sse_events(reply.message)
            extra = sorted(reply.extra_events, key=lambda e: e[0])
            for i, (kind, data) in enumerate(events):
                while extra and extra[0][0] <= i:
                    _, k, d = extra.pop(0)
                    self._chunk(encode_event(k, d))
                self._chunk(encode_event(kind, data))
            for _, k, d in extra:
                self._chunk(encode_event(k, d))
            self._chunk(b"")  # the terminating zero-length chunk

        def _answer_messages(self, r: Recorded) -> None:
            reply: Any = None
            if mock.script is not None:
                try:
                    reply = mock.script(r)
                except Exception as e:  # a broken script must show in the test, not hang it
                    mock.errors.append(f"{type(e).__name__}: {e}")
                    self._send(500, error_body("api_error", f"mock script failed: {e}"))
                    return
            if reply is None:
                reply = default_reply(r)
            if isinstance(reply, dict):
                reply = Reply(message=reply)
            if reply.gate is not None:
                mock.gates.append(reply.gate.wait(GATE_TIMEOUT))
            if reply.delay:
                time.sleep(reply.delay)
            if reply.message is None:
                self._send(reply.status, reply.body if reply.body is not None else b"", reply.headers)
                return
            streams = r.streams() if reply.stream is None else reply.stream
            if streams:
                self._stream(reply)
            else:
                self._send(reply.status, reply.message, reply.headers)

        def do_POST(self) -> None:
            r = self._record()
            if r.is_count_tokens():
                if not isinstance(r.json, dict) or "messages" not in r.json:
                    self._send(400, error_body("invalid_request_error", "messages: Field required"))
                else:
                    self._send(200, {"input_tokens": count_tokens_of(r)})
            elif r.is_bedrock() and mock.aws_credentials is not None and (
                    problem := bedrock_wire.check_sigv4(r.method, r.path, r.headers, r.body, *mock.aws_credentials)):
                self._send(403, {"message": f"The request signature we calculated does not match: {problem}"},
                           [("x-amzn-ErrorType", "InvalidSignatureException")])
            elif r.is_messages():
                if not isinstance(r.json, dict) or "messages" not in r.json:
                    self._send(400, error_body("invalid_request_error", "messages: Field required"))
                else:
                    self._answer_messages(r)
            else:
                self._not_found()

        def do_GET(self) -> None:
            r = self._record()
            if r.route == "/inference-profiles":
                # Bedrock's ListInferenceProfiles, which Claude Code on
                # Bedrock asks before its first turn: none here.
                self._send(200, {"inferenceProfileSummaries": []})
                return
            self._not_found()

        def do_HEAD(self) -> None:
            self._record()
            self._send(404, b"", head_only=True)

        def _not_found(self) -> None:
            self._send(404, error_body("not_found_error", f"Not found: {self.command} {self.path}"))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mock-anthropic", daemon=True)
    mock = MockAnthropic(server=server, thread=thread)
    thread.start()
    return mock
