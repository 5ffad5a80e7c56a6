"""A mock OpenAI Responses upstream in pure Python (standard library only).

It listens on 127.0.0.1, port 0 (the kernel picks a free one), records every
request it receives (method, path and query, headers, raw body bytes, parsed
JSON, the conversation it rebuilt, the response it produced) and answers:

- ``POST /v1/responses`` (any prefix): a ``response`` object (id ``resp_...``,
  ``object: "response"``, ``status``, ``output`` items with ids, ``usage``
  {input_tokens, input_tokens_details{cached_tokens}, output_tokens,
  output_tokens_details{reasoning_tokens}, total_tokens}, the request's
  ``tools`` echoed, ...), or, when the request has ``"stream": true``, the
  same response as server-sent events exactly as OpenAI sends them
  (``event: <type>\\ndata: <json>\\n\\n``, ``type`` and ``sequence_number``
  first in every event, the counter from 0): response.created,
  response.in_progress, per output item response.output_item.added, then for
  a message content_part.added / output_text.delta... / output_text.done /
  content_part.done, for a function_call function_call_arguments.delta... /
  .done, for a reasoning item reasoning_summary_part.added /
  reasoning_summary_text.delta... / .done / reasoning_summary_part.done, for a
  custom_tool_call custom_tool_call_input.delta... / .done, then
  response.output_item.done; last response.completed (or response.incomplete
  / response.failed) with the full response. Each event is written and
  flushed on its own (chunked transfer encoding, HTTP/1.1).
- ``GET /v1/responses/{id}``: a response it produced and stored; anything
  else a 404 in the API's words.
- ``POST /v1/responses/compact``: a compaction (one opaque item).
- ``GET /v1/models``: a models list. Everything else: a 404 in the OpenAI
  error format (recorded like the rest).

State, as the real API keeps it (what matters to a proxy):

- Every response is kept per id with its whole conversation (the input it
  was given, after ``previous_response_id`` was resolved, plus its output).
  ``previous_response_id`` rebuilds the conversation as the API does: the
  previous response's conversation, then the new ``input``. An unknown id,
  or the id of a response made with ``store: false``, is a 400
  ``previous_response_not_found``; GET of an unknown or unstored id a 404.
- The rebuilt conversation is checked like the API checks it: every
  ``function_call`` needs its ``function_call_output`` later on ("No tool
  output found for function call <call_id>."), every output needs its call
  before it ("No tool call found for function call output with call_id
  <call_id>."); a reasoning item the mock issued must come back followed by
  the item that followed it ("Item 'rs_...' of type 'reasoning' was provided
  without its required following item."), and its ``encrypted_content``
  byte for byte ("The encrypted content for item rs_... could not be
  verified."). With ``store: false``, a reasoning item (or an
  ``item_reference``) given by id without its ``encrypted_content`` is a 400
  ("Item with id 'rs_...' not found. Items are not persisted when `store` is
  set to false. ...").
- A reasoning item carries ``encrypted_content`` only when the request's
  ``include`` asks for ``reasoning.encrypted_content``.

What a request gets is decided by ``MockResponses.script``, a function of the
recorded request (``r.json``, and ``r.conversation``: the rebuilt input items)
returning a ``Reply``, a list of output items, or None for the default answer
(one short message). Tests script by the request's content (the last input
item, a call_id, the tools offered), never by counting calls.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import mock_http

GATE_TIMEOUT = 10.0
MODEL = "gpt-mock-1"
DEFAULT_TEXT = "Mock reply."
CREATED_AT = 1_760_000_000


# --- output items ------------------------------------------------------------

def message(text: str, *, id: str | None = None, phase: str | None = None) -> dict:
    item = {"id": id, "type": "message", "status": "completed", "content": [
        {"type": "output_text", "annotations": [], "logprobs": [], "text": text}], "role": "assistant"}
    if phase is not None:
        item["phase"] = phase
    return item


def function_call(call_id: str, name: str, arguments: str | dict, *, id: str | None = None) -> dict:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": id, "type": "function_call", "status": "completed", "arguments": arguments,
            "call_id": call_id, "name": name}


def custom_tool_call(call_id: str, name: str, input: str, *, id: str | None = None) -> dict:
    return {"id": id, "type": "custom_tool_call", "status": "completed", "call_id": call_id, "input": input,
            "name": name}


def reasoning(*summary: str, id: str | None = None, encrypted_content: str | None = None) -> dict:
    """A reasoning item; its encrypted_content is made up by the mock unless given."""
    item = {"id": id, "type": "reasoning", "summary": [{"type": "summary_text", "text": s} for s in summary]}
    if encrypted_content is not None:
        item["encrypted_content"] = encrypted_content
    return item


def output_text(item: dict) -> str:
    return "".join(p.get("text", "") for p in item.get("content") or [] if p.get("type") == "output_text")


@dataclass
class Reply:
    """One answer. ``output`` (items, ids given or assigned) becomes a response,
    sent as JSON or as SSE as the request asks (``stream`` forces either).
    ``status``/``body`` make an error reply instead."""

    output: list[dict] | None = None
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: Any = None  # an error reply's JSON value (or bytes, sent as they are)
    stream: bool | None = None
    usage: dict | None = None
    # The terminal state: "completed", "incomplete" (with incomplete_details)
    # or "failed" (with error): the terminal event and the status follow it.
    terminal: str = "completed"
    error: dict | None = None
    delay: float = 0.0  # seconds to wait before answering
    # When set, the stream waits (at most GATE_TIMEOUT s) before its event
    # number ``gate_before`` for the test to set this event, and appends
    # whether it was set in time to MockResponses.gates (non-streaming: before
    # answering). A client that got the events before the gate while the
    # upstream holds the rest proves the proxy streams.
    gate: threading.Event | None = None
    gate_before: int = 2
    gate_item: int | None = None  # when set: wait before this output item's output_item.added instead
    # Streams only: stop after this many events and close the connection (no
    # terminal event): a broken upstream stream.
    cut_after: int | None = None
    pieces: int = 3  # deltas per text / arguments


def error_body(message_text: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message_text, "type": type_, "param": param, "code": code}}


# --- reading requests ----------------------------------------------------------

def items_of(input_: Any) -> list[dict]:
    """``input`` as items: a string is one user message."""
    if isinstance(input_, str):
        return [{"type": "message", "role": "user", "content": input_}]
    return [i for i in input_ or [] if isinstance(i, dict)]


def item_type(item: dict) -> str:
    return item.get("type") or ("message" if "role" in item else "")


def tool_names(body: dict) -> list[str]:
    return [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]


def output_text_of(output: Any) -> str:
    """The text of a function_call_output's ``output``: the string, or its
    input_text parts joined."""
    if isinstance(output, str):
        return output
    return "".join(p.get("text", "") for p in output or [] if isinstance(p, dict) and p.get("type") == "input_text")


def tool_outputs(items: list[dict]) -> list[dict]:
    return [i for i in items if item_type(i) in ("function_call_output", "custom_tool_call_output")]


def last_tool_outputs(items: list[dict]) -> list[dict]:
    """The tool outputs at the end of ``items`` (after the last non-output item)."""
    out: list[dict] = []
    for item in reversed(items):
        if item_type(item) not in ("function_call_output", "custom_tool_call_output"):
            break
        out.insert(0, item)
    return out


def message_text(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def user_texts(items: list[dict]) -> list[str]:
    return [message_text(i) for i in items if item_type(i) == "message" and i.get("role") == "user"]


def stub_ref(text_: str) -> str | None:
    for line in text_.splitlines():
        if line.startswith("ref: "):
            return line[len("ref: "):].strip()
    return None


@dataclass
class Recorded:
    method: str
    path: str  # with the query
    headers: list[tuple[str, str]]  # (lower-cased name, value), in order
    body: bytes
    json: Any = None
    time: float = 0.0
    status: int | None = None  # what the mock answered (set once it has)
    conversation: list[dict] | None = None  # the input after previous_response_id was resolved
    response: dict | None = None  # the response object the mock produced
    events: list[dict] = field(default_factory=list)  # what it streamed

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[0] if values else None

    def header_names(self) -> set[str]:
        return {k for k, _ in self.headers}

    @property
    def route(self) -> str:
        return self.path.split("?")[0]

    def is_responses(self) -> bool:
        return self.method == "POST" and self.route.endswith("/v1/responses")

    def streams(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True

    def input_items(self) -> list[dict]:
        return items_of(self.json.get("input")) if isinstance(self.json, dict) else []


Script = Callable[[Recorded], "Reply | list[dict] | None"]


@dataclass
class Stored:
    response: dict
    conversation: list[dict]  # input + output
    store: bool


@dataclass
class MockResponses:
    server: ThreadingHTTPServer
    thread: threading.Thread
    received: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    script: Script | None = None
    errors: list[str] = field(default_factory=list)  # a script that raised
    gates: list[bool] = field(default_factory=list)
    responses: dict[str, Stored] = field(default_factory=dict)
    # Items the mock issued, by id: reasoning items and what followed them.
    issued: dict[str, dict] = field(default_factory=dict)
    following: dict[str, dict] = field(default_factory=dict)
    counter: Any = field(default_factory=lambda: itertools.count(1))
    # Reject what the real API rejects (set False to capture a client freely).
    strict: bool = True

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

    def responses_posts(self) -> list[Recorded]:
        return [r for r in self.requests() if r.is_responses()]

    def reset(self) -> None:
        """Forget the requests and the script; the stored responses stay (ids
        never repeat), as the real API keeps them."""
        with self.lock:
            self.received.clear()
            self.errors.clear()
            self.gates.clear()
        self.script = None
        self.strict = True

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def new_id(self, prefix: str) -> str:
        n = next(self.counter)
        return f"{prefix}_{hashlib.sha256(f'{id(self)}:{n}'.encode()).hexdigest()[:24]}{n:04d}"


def encrypted_for(item_id: str, summary: list[dict]) -> str:
    digest = hashlib.sha256((item_id + json.dumps(summary)).encode()).hexdigest()
    return f"gAAAAB{digest}{digest[:20]}=="


def default_usage(r: Recorded, output: list[dict]) -> dict:
    reasoning_tokens = 7 * sum(1 for i in output if i["type"] == "reasoning")
    output_tokens = 11 + reasoning_tokens + sum(len(json.dumps(i)) // 16 for i in output)
    input_tokens = max(1, len(r.body) // 4)
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens}


def response_object(body: dict, resp_id: str, output: list[dict], status: str, usage: dict | None,
                    *, error: dict | None = None, incomplete: dict | None = None) -> dict:
    """A response object with the real API's keys, in its order."""
    reasoning_ = body.get("reasoning") or {}
    return {
        "id": resp_id,
        "object": "response",
        "created_at": CREATED_AT,
        "status": status,
        "background": bool(body.get("background", False)),
        "completed_at": CREATED_AT + 1 if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body.get("model") or MODEL,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning_.get("effort"), "summary": reasoning_.get("summary")},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier") or "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _pieces(s: str, n: int) -> list[str]:
    if not s:
        return [""]
    size = max(1, -(-len(s) // n))
    return [s[i:i + size] for i in range(0, len(s), size)]


def sse_events(created: dict, final: dict, pieces: int = 3) -> list[dict]:
    """The events OpenAI streams for ``final`` (``created``: the response as
    it stands at the start). sequence_number is filled in by the caller."""
    events: list[dict] = [{"type": "response.created", "response": created},
                          {"type": "response.in_progress", "response": created}]
    for index, item in enumerate(final["output"]):
        kind = item["type"]
        common = {"item_id": item["id"], "output_index": index}
        if kind == "message":
            added = {k: v for k, v in item.items()}
            added["status"] = "in_progress"
            added["content"] = []
            events.append({"type": "response.output_item.added", "output_index": index, "item": added})
            for ci, part in enumerate(item["content"]):
                empty = dict(part)
                empty["text"] = ""
                events.append({"type": "response.content_part.added", **common, "content_index": ci, "part": empty})
                for p in _pieces(part["text"], pieces):
                    events.append({"type": "response.output_text.delta", **common, "content_index": ci,
                                   "delta": p, "logprobs": []})
                events.append({"type": "response.output_text.done", **common, "content_index": ci,
                               "text": part["text"], "logprobs": []})
                events.append({"type": "response.content_part.done", **common, "content_index": ci, "part": part})
        elif kind == "function_call":
            added = dict(item)
            added["status"] = "in_progress"
            added["arguments"] = ""
            events.append({"type": "response.output_item.added", "output_index": index, "item": added})
            for p in _pieces(item["arguments"], pieces):
                events.append({"type": "response.function_call_arguments.delta", **common, "delta": p})
            events.append({"type": "response.function_call_arguments.done", **common,
                           "name": item["name"], "arguments": item["arguments"]})
        elif kind == "custom_tool_call":
            added = dict(item)
            added["status"] = "in_progress"
            added["input"] = ""
            events.append({"type": "response.output_item.added", "output_index": index, "item": added})
            for p in _pieces(item["input"], pieces):
                events.append({"type": "response.custom_tool_call_input.delta", **common, "delta": p})
            events.append({"type": "response.custom_tool_call_input.done", **common, "input": item["input"]})
        elif kind == "reasoning":
            added = {k: v for k, v in item.items() if k != "encrypted_content"}
            added["summary"] = []
            events.append({"type": "response.output_item.added", "output_index": index, "item": added})
            for si, part in enumerate(item["summary"]):
                events.append({"type": "response.reasoning_summary_part.added", **common, "summary_index": si,
                               "part": {"type": "summary_text", "text": ""}})
                for p in _pieces(part["text"], pieces):
                    events.append({"type": "response.reasoning_summary_text.delta", **common, "summary_index": si,
                                   "delta": p})
                events.append({"type": "response.reasoning_summary_text.done", **common, "summary_index": si,
                               "text": part["text"]})
                events.append({"type": "response.reasoning_summary_part.done", **common, "summary_index": si,
                               "part": part})
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response." + final["status"], "response": final})
    return events


def numbered(events: list[dict]) -> list[dict]:
    """``type`` then ``sequence_number`` first in each event, as the API sends them."""
    out = []
    for n, e in enumerate(events):
        ev = {"type": e["type"], "sequence_number": n}
        ev.update({k: v for k, v in e.items() if k != "type"})
        out.append(ev)
    return out


def encode_event(data: dict) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


def parse_sse(raw: bytes) -> list[tuple[str | None, dict]]:
    """(event name, data) of each event of an SSE body."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if data:
            out.append((name, json.loads(b"\n".join(data))))
    return out


def start() -> MockResponses:
    mock: MockResponses

    def check_conversation(body: dict, conversation: list[dict]) -> tuple[int, dict] | None:
        """The API's checks of a conversation; an error reply, or None."""
        store = body.get("store", True) is not False
        calls: dict[str, int] = {}
        answered: set[str] = set()
        for n, item in enumerate(conversation):
            kind = item_type(item)
            if kind in ("function_call", "custom_tool_call") and "call_id" in item:
                calls[item["call_id"]] = n
            elif kind in ("function_call_output", "custom_tool_call_output"):
                cid = item.get("call_id")
                if cid not in calls:
                    return 400, error_body(f"No tool call found for function call output with call_id {cid}.",
                                           param="input")
                answered.add(cid)
            elif kind == "item_reference" and not store:
                return 404, error_body(f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                                       "`store` is set to false. Try again with `store` set to true, or remove this "
                                       "item from your input.", param="input")
            elif kind == "reasoning":
                rid = item.get("id")
                if not store and rid and not item.get("encrypted_content"):
                    return 404, error_body(f"Item with id '{rid}' not found. Items are not persisted when `store` "
                                           "is set to false. Try again with `store` set to true, or remove this item "
                                           "from your input.", param="input")
                issued = mock.issued.get(rid or "")
                if issued is not None and item.get("encrypted_content") is not None \
                        and item["encrypted_content"] != issued["encrypted_content"]:
                    return 400, error_body(f"The encrypted content for item {rid} could not be verified.",
                                           param="input")
                follow = mock.following.get(rid or "")
                if follow is not None:
                    nxt = conversation[n + 1] if n + 1 < len(conversation) else None
                    if nxt is None or item_type(nxt) != follow["type"]:
                        ok = False
                    elif follow["type"] in ("function_call", "custom_tool_call"):
                        ok = nxt.get("call_id") == follow.get("call_id")
                    else:
                        ok = nxt.get("id") == follow.get("id")
                    if not ok:
                        return 400, error_body(f"Item '{rid}' of type 'reasoning' was provided without its "
                                               "required following item.", param="input")
        for cid in calls:
            if cid not in answered:
                return 400, error_body(f"No tool output found for function call {cid}.", param="input")
        return None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked responses

        def log_message(self, *_args: Any) -> None:  # quiet
            pass

        def _read_body(self) -> bytes:
            return mock_http.read_body(self)

        def _record(self) -> Recorded:
            body = self._read_body()
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            decoded = body
            if encoding == "zstd":
                decoded = b""  # not readable with the standard library: recorded raw
            elif encoding in ("gzip", "deflate"):
                import zlib
                decoded = zlib.decompress(body, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
            try:
                parsed = json.loads(decoded) if decoded else None
            except ValueError:
                parsed = None
            r = Recorded(method=self.command, path=self.path,
                         headers=[(k.lower(), v) for k, v in self.headers.items()],
                         body=body, json=parsed, time=time.time())
            mock.record(r)
            self.recorded = r
            return r

        def _send(self, status: int, value: Any, headers: list[tuple[str, str]] = ()) -> None:
            self.recorded.status = status
            data = value if isinstance(value, bytes) else json.dumps(value).encode()
            self.send_response(status)
            names = {k.lower() for k, _ in headers}
            if "content-type" not in names:
                self.send_header("Content-Type", "application/json")
            if "x-request-id" not in names:
                self.send_header("x-request-id", "req_mock_responses_1")
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _stream(self, reply: Reply, created: dict, final: dict) -> None:
            self.recorded.status = 200
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("x-request-id", "req_mock_responses_stream_1")
            for k, v in reply.headers:
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = numbered(sse_events(created, final, reply.pieces))
            for i, event in enumerate(events):
                if reply.cut_after is not None and i >= reply.cut_after:
                    self.close_connection = True
                    self.wfile.flush()
                    return  # no terminating chunk: the connection just closes
                at_gate = (i == reply.gate_before) if reply.gate_item is None else (
                    event["type"] == "response.output_item.added" and event["output_index"] == reply.gate_item)
                if reply.gate is not None and at_gate:
                    mock.gates.append(reply.gate.wait(GATE_TIMEOUT))
                self.recorded.events.append(event)
                self._chunk(encode_event(event))
            self._chunk(b"")  # the terminating zero-length chunk

        def _answer(self, r: Recorded) -> None:
            body = r.json
            if not isinstance(body, dict):
                self._send(400, error_body("We could not parse the JSON body of your request.", code=None))
                return
            if "model" not in body:
                self._send(400, error_body("Missing required parameter: 'model'.", param="model",
                                           code="missing_required_parameter"))
                return
            conversation: list[dict] = []
            prev = body.get("previous_response_id")
            if prev is not None:
                stored = mock.responses.get(prev)
                if stored is None or not stored.store:
                    self._send(400, error_body(f"Previous response with id '{prev}' not found.",
                                               param="previous_response_id", code="previous_response_not_found"))
                    return
                conversation = list(stored.conversation)
            conversation += items_of(body.get("input"))
            r.conversation = conversation
            if mock.strict:
                problem = check_conversation(body, conversation)
                if problem is not None:
                    self._send(*problem)
                    return
            reply: Any = None
            if mock.script is not None:
                try:
                    reply = mock.script(r)
                except Exception as e:  # a broken script must show in the test, not hang it
                    mock.errors.append(f"{type(e).__name__}: {e}")
                    self._send(500, error_body(f"mock script failed: {e}", "server_error"))
                    return
            if reply is None:
                reply = Reply(output=[message(DEFAULT_TEXT)])
            if isinstance(reply, list):
                reply = Reply(output=reply)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.output is None:
                self._send(reply.status, reply.body if reply.body is not None else b"", reply.headers)
                return
            include = body.get("include") or []
            output = []
            for item in reply.output:
                item = json.loads(json.dumps(item))  # a copy
                prefix = {"message": "msg", "function_call": "fc", "reasoning": "rs",
                          "custom_tool_call": "ctc"}.get(item["type"], "item")
                if item.get("id") is None:
                    item["id"] = mock.new_id(prefix)
                if item["type"] == "reasoning":
                    enc = item.pop("encrypted_content", None) or encrypted_for(item["id"], item["summary"])
                    mock.issued[item["id"]] = {"encrypted_content": enc}
                    if "reasoning.encrypted_content" in include:
                        item["encrypted_content"] = enc
                output.append(item)
            for a, b in zip(output, output[1:]):
                if a["type"] == "reasoning":
                    mock.following[a["id"]] = {"type": b["type"], "id": b.get("id"), "call_id": b.get("call_id")}
            resp_id = mock.new_id("resp")
            usage = reply.usage if reply.usage is not None else default_usage(r, output)
            incomplete = {"reason": "max_output_tokens"} if reply.terminal == "incomplete" else None
            error = (reply.error or {"code": "server_error", "message": "The model failed."}) \
                if reply.terminal == "failed" else None
            final = response_object(body, resp_id, output, reply.terminal, usage, error=error, incomplete=incomplete)
            created = response_object(body, resp_id, [], "in_progress", None)
            r.response = final
            mock.responses[resp_id] = Stored(response=final, conversation=conversation + output,
                                             store=body.get("store", True) is not False)
            streams = r.streams() if reply.stream is None else reply.stream
            if streams:
                self._stream(reply, created, final)
            else:
                if reply.gate is not None:
                    mock.gates.append(reply.gate.wait(GATE_TIMEOUT))
                self._send(reply.status, final, reply.headers)

        def do_POST(self) -> None:
            r = self._record()
            if r.is_responses():
                self._answer(r)
            elif r.route.endswith("/v1/responses/compact") and isinstance(r.json, dict):
                # A compaction: one opaque item standing for the whole input.
                digest = hashlib.sha256(r.body).hexdigest()
                self._send(200, {"id": mock.new_id("resp"), "object": "response.compaction",
                                 "created_at": CREATED_AT,
                                 "output": [{"id": mock.new_id("cmp"), "type": "compaction",
                                             "encrypted_content": f"gAAAAC{digest}=="}],
                                 "usage": default_usage(r, [])})
            else:
                self._not_found()

        def do_GET(self) -> None:
            r = self._record()
            route = r.route
            if route.endswith("/v1/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": MODEL, "object": "model", "created": CREATED_AT, "owned_by": "mock"}]})
                return
            marker = "/v1/responses/"
            if marker in route:
                resp_id = route.split(marker, 1)[1]
                stored = mock.responses.get(resp_id)
                if stored is not None and stored.store:
                    self._send(200, stored.response)
                else:
                    self._send(404, error_body(f"Response with id '{resp_id}' not found."))
                return
            self._not_found()

        def do_DELETE(self) -> None:
            self._record()
            self._not_found()

        def _not_found(self) -> None:
            self._send(404, error_body(f"Invalid URL ({self.command} {self.path})"))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mock-responses", daemon=True)
    mock = MockResponses(server=server, thread=thread)
    thread.start()
    return mock
