"""A mock Gemini API upstream in pure Python (standard library only).

It listens on 127.0.0.1, port 0, records every request (method, path and
query, headers, raw body, parsed JSON) and answers, under any prefix
(``/v1beta/models/{m}``, ``/v1/projects/{p}/locations/{l}/publishers/google/models/{m}``):

- ``:generateContent``: a ``GenerateContentResponse`` as JSON;
- ``:streamGenerateContent?alt=sse``: the same response as Google streams
  it: one ``data: <json>`` line and a blank line per event, each event a
  whole ``GenerateContentResponse`` carrying only its new parts (a text part
  cut into pieces, a ``functionCall`` whole in one event), every event with
  ``modelVersion``, ``responseId`` and the cumulative ``usageMetadata``, the
  last one with ``finishReason``; no ``[DONE]``, the stream ends with the
  body. Each event is written and flushed on its own (chunked, HTTP/1.1);
- ``:countTokens``: ``{"totalTokens": N}``;
- anything else: a 404 in Google's error format.

It validates a ``generateContent`` request as the real API does, and answers
a 400 ``INVALID_ARGUMENT`` naming the problem when:

- ``contents`` is missing or empty, a role is neither ``user`` nor ``model``,
  the first content is not a user's, or (``strict_roles``, Gemini CLI's
  case: it merges consecutive contents of one role) two contents in a row
  have the same role;
- a model content's ``functionCall`` parts are not answered, in the next
  content, by as many ``functionResponse`` parts with the same names (and
  the same ids where the call had one), or a ``functionResponse`` answers no
  call;
- a ``thoughtSignature`` is not one the mock issued (or Gemini CLI's
  ``skip_thought_signature_validator``); or, in the current turn (after the
  last user text), a ``functionCall`` the mock issued with a signature comes
  back without it or with another, or (``require_signatures``, Gemini 3's
  rule) a model step's first ``functionCall`` has none;
- a function declaration has no name, both or neither of ``parameters`` and
  ``parametersJsonSchema``, or a name declared twice.

What a request gets is decided by ``MockGemini.script``, a function of the
recorded request returning a ``Reply`` (or a bare response dict), or None
for the default answer (a short text). Tests script by content, never by
counting calls.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import mock_http

MODEL_VERSION = "gemini-mock-1"
DEFAULT_TEXT = "Mock reply."
SKIP_SIGNATURE = "skip_thought_signature_validator"
# The usage every response carries unless a reply sets its own.
USAGE = {"promptTokenCount": 321, "candidatesTokenCount": 17, "totalTokenCount": 338}


@dataclass
class Recorded:
    method: str
    path: str  # with the query
    headers: list[tuple[str, str]]
    body: bytes
    json: Any = None
    status: int | None = None

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[0] if values else None

    @property
    def route(self) -> str:
        return self.path.split("?")[0]

    @property
    def action(self) -> str:
        """generateContent, streamGenerateContent, countTokens, or ""."""
        tail = self.route.rsplit("/", 1)[-1]
        return tail.split(":", 1)[1] if ":" in tail else ""

    @property
    def model(self) -> str:
        return self.route.rsplit("/", 1)[-1].split(":", 1)[0]

    def generates(self) -> bool:
        return self.method == "POST" and self.action in ("generateContent", "streamGenerateContent")


@dataclass
class Reply:
    response: dict | None = None  # a GenerateContentResponse
    status: int = 200
    body: Any = None  # an error reply's JSON value
    pieces: int = 3  # events a text part is cut into when streamed
    delay: float = 0.0


def response(parts: list[dict], finish: str = "STOP", *, usage: dict | None = None,
             response_id: str = "resp_mock_1") -> dict:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": dict(usage or USAGE),
        "modelVersion": MODEL_VERSION,
        "responseId": response_id,
    }


def text(t: str, signature: str | None = None) -> dict:
    part: dict = {"text": t}
    if signature:
        part["thoughtSignature"] = signature
    return part


def thought(t: str) -> dict:
    return {"text": t, "thought": True}


def call(name: str, args: dict, *, id: str | None = None, signature: str | None = None) -> dict:
    fc: dict = {"name": name, "args": args}
    if id is not None:
        fc["id"] = id
    part: dict = {"functionCall": fc}
    if signature:
        part["thoughtSignature"] = signature
    return part


def call_keys(fc: dict) -> list[str]:
    """A function call's identities: its id (a client may add one the API
    did not send) and its name with its arguments."""
    keys = ["call:" + json.dumps([fc.get("name"), fc.get("args")], sort_keys=True)]
    if fc.get("id"):
        keys.append("id:" + str(fc["id"]))
    return keys


def error_body(code: int, status: str, message_text: str) -> dict:
    return {"error": {"code": code, "message": message_text, "status": status}}


def _pieces(s: str, n: int) -> list[str]:
    if not s:
        return [""]
    size = max(1, -(-len(s) // n))
    return [s[i:i + size] for i in range(0, len(s), size)]


def sse_events(resp: dict, pieces: int = 3) -> list[dict]:
    """The events Google streams for ``resp``."""
    candidate = resp["candidates"][0]
    split: list[dict] = []
    for part in candidate["content"]["parts"]:
        if "text" in part and not part.get("thought") and "thoughtSignature" not in part:
            split += [{"text": p} for p in _pieces(part["text"], pieces)]
        else:
            split.append(part)
    events = []
    for i, part in enumerate(split):
        c: dict = {"content": {"role": "model", "parts": [part]}, "index": 0}
        if i == len(split) - 1:
            c["finishReason"] = candidate.get("finishReason", "STOP")
        events.append({"candidates": [c], "usageMetadata": resp["usageMetadata"],
                       "modelVersion": resp["modelVersion"], "responseId": resp["responseId"]})
    return events


# --- reading requests ------------------------------------------------------

def contents(body: dict) -> list[dict]:
    return [c for c in body.get("contents") or [] if isinstance(c, dict)]


def parts_of(content: dict) -> list[dict]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


def function_responses(body: dict) -> list[dict]:
    """Every functionResponse of the request, in order."""
    return [p["functionResponse"] for c in contents(body) if c.get("role") == "user"
            for p in parts_of(c) if "functionResponse" in p]


def last_responses(body: dict) -> list[dict]:
    """The functionResponse parts of the last content, when it is a user's."""
    cs = contents(body)
    if not cs or cs[-1].get("role") != "user":
        return []
    return [p["functionResponse"] for p in parts_of(cs[-1]) if "functionResponse" in p]


def user_texts(body: dict) -> list[str]:
    return [p["text"] for c in contents(body) if c.get("role") == "user" for p in parts_of(c)
            if isinstance(p.get("text"), str)]


def declarations(body: dict) -> list[dict]:
    return [d for t in body.get("tools") or [] if isinstance(t, dict)
            for d in t.get("functionDeclarations") or [] if isinstance(d, dict)]


def tool_names(body: dict) -> list[str]:
    return [d.get("name") for d in declarations(body)]


def output_text(fr: dict) -> str:
    """What a functionResponse carries: response.output (or .error) when a
    string, else its JSON."""
    resp = fr.get("response")
    if isinstance(resp, dict):
        for key in ("output", "error", "result"):
            if isinstance(resp.get(key), str):
                return resp[key]
    return json.dumps(resp)


def stub_ref(text_: str) -> str | None:
    for line in text_.splitlines():
        if line.startswith("ref: "):
            return line[len("ref: "):].strip()
    return None


Script = Callable[[Recorded], "Reply | dict | None"]


@dataclass
class MockGemini:
    server: ThreadingHTTPServer
    thread: threading.Thread
    received: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    script: Script | None = None
    errors: list[str] = field(default_factory=list)
    strict_roles: bool = False
    # Gemini 3's rule: a step's first functionCall in the current turn
    # carries a thoughtSignature.
    require_signatures: bool = False
    # Signatures the mock issued, and the signature of each call it issued
    # with one (by call id).
    issued: set[str] = field(default_factory=set)
    signed_calls: dict[str, str] = field(default_factory=dict)

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

    def generate_posts(self) -> list[Recorded]:
        return [r for r in self.requests() if r.generates()]

    def reset(self) -> None:
        with self.lock:
            self.received.clear()
            self.errors.clear()
            self.issued.clear()
            self.signed_calls.clear()
        self.script = None
        self.strict_roles = False
        self.require_signatures = False

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def issue(self, *signatures: str) -> None:
        """Signatures taken as issued by an earlier answer (a conversation a
        test writes itself)."""
        with self.lock:
            self.issued.update(signatures)

    def note_issued(self, resp: dict) -> None:
        with self.lock:
            for c in resp.get("candidates") or []:
                for p in parts_of(c.get("content") or {}):
                    sig = p.get("thoughtSignature")
                    if sig:
                        self.issued.add(sig)
                        fc = p.get("functionCall")
                        if isinstance(fc, dict):
                            for key in call_keys(fc):
                                self.signed_calls[key] = sig

    def problems(self, body: Any) -> list[str]:
        """What the real API would refuse in this generateContent body."""
        if not isinstance(body, dict):
            return ["the body is not a JSON object"]
        cs = body.get("contents")
        if not isinstance(cs, list) or not cs:
            return ["contents is required"]
        out: list[str] = []
        for i, c in enumerate(cs):
            if not isinstance(c, dict) or c.get("role") not in ("user", "model"):
                out.append(f"contents[{i}]: role must be user or model")
        if out:
            return out
        if cs[0]["role"] != "user":
            out.append("contents[0] must be the user's")
        if self.strict_roles:
            for i in range(1, len(cs)):
                if cs[i]["role"] == cs[i - 1]["role"]:
                    out.append(f"contents[{i}]: two {cs[i]['role']} contents in a row")
        with self.lock:
            issued, signed = set(self.issued), dict(self.signed_calls)
        # The current turn: the contents after the last user content with a
        # text part and no functionResponse; only there does the API insist
        # on signatures (Gemini 3: the first functionCall of each step).
        current = 0
        for i, c in enumerate(cs):
            ps = parts_of(c)
            if c["role"] == "user" and any("text" in p for p in ps) and not any("functionResponse" in p for p in ps):
                current = i + 1
        for i, c in enumerate(cs):
            ps = parts_of(c)
            if not ps:
                out.append(f"contents[{i}]: no parts")
            calls = [p["functionCall"] for p in ps if isinstance(p.get("functionCall"), dict)]
            answers = [p["functionResponse"] for p in ps if isinstance(p.get("functionResponse"), dict)]
            if c["role"] == "model":
                for p in ps:
                    sig = p.get("thoughtSignature")
                    if sig is not None and sig not in issued and sig != SKIP_SIGNATURE:
                        out.append(f"contents[{i}]: thoughtSignature {sig[:24]!r} was never issued")
                    fc = p.get("functionCall")
                    if (i >= current and isinstance(fc, dict)
                            and any(signed.get(k, sig) != sig for k in call_keys(fc))):
                        out.append(f"contents[{i}]: the call {fc.get('name')} {fc.get('id')} lost its "
                                   "thoughtSignature")
                first = next((p for p in ps if "functionCall" in p), None)
                if (self.require_signatures and i >= current and first is not None
                        and not first.get("thoughtSignature")):
                    out.append(f"contents[{i}]: the first functionCall of a step in the current turn has no "
                               "thoughtSignature")
                if answers:
                    out.append(f"contents[{i}]: a functionResponse in a model content")
                if calls:
                    nxt = cs[i + 1] if i + 1 < len(cs) else None
                    got = [p["functionResponse"] for p in parts_of(nxt or {})
                           if isinstance(p.get("functionResponse"), dict)] if nxt and nxt["role"] == "user" else []
                    if [a.get("name") for a in got] != [fc.get("name") for fc in calls]:
                        out.append(f"contents[{i}]: the function calls {[fc.get('name') for fc in calls]} "
                                   f"are not answered in order by the next content ({[a.get('name') for a in got]})")
                    for fc, a in zip(calls, got):
                        if fc.get("id") and a.get("id") != fc["id"]:
                            out.append(f"contents[{i}]: the call {fc['id']} is answered with id {a.get('id')}")
            elif answers:
                prev = cs[i - 1] if i > 0 else None
                if not prev or prev["role"] != "model" or not any("functionCall" in p for p in parts_of(prev)):
                    out.append(f"contents[{i}]: a functionResponse that answers no functionCall")
        names: list[str] = []
        for d in declarations(body):
            if not d.get("name"):
                out.append("a function declaration without a name")
            if "parameters" in d and ("parametersJsonSchema" in d or "parameters_json_schema" in d):
                out.append(f"{d.get('name')}: parameters and parametersJsonSchema are mutually exclusive")
            names.append(d.get("name"))
        dup = sorted({n for n in names if names.count(n) > 1 and n})
        if dup:
            out.append(f"function declarations declared twice: {dup}")
        return out


def start() -> MockGemini:
    mock: MockGemini

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def _record(self) -> Recorded:
            body = mock_http.read_body(self)
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            r = Recorded(method=self.command, path=self.path,
                         headers=[(k.lower(), v) for k, v in self.headers.items()], body=body, json=parsed)
            mock.record(r)
            self.recorded = r
            return r

        def _send(self, status: int, value: Any, head_only: bool = False) -> None:
            self.recorded.status = status
            data = value if isinstance(value, bytes) else json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head_only:
                self.wfile.write(data)
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _stream(self, reply: Reply) -> None:
            self.recorded.status = 200
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in sse_events(reply.response, reply.pieces):
                self._chunk(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\r\n\r\n")
            self._chunk(b"")

        def do_POST(self) -> None:
            r = self._record()
            if r.action == "countTokens":
                if not isinstance(r.json, dict):
                    self._send(400, error_body(400, "INVALID_ARGUMENT", "Invalid JSON payload received."))
                else:
                    self._send(200, {"totalTokens": max(1, len(r.body) // 4)})
                return
            if not r.generates():
                self._send(404, error_body(404, "NOT_FOUND", f"Not found: {self.command} {self.path}"))
                return
            problems = mock.problems(r.json)
            if problems:
                self._send(400, error_body(400, "INVALID_ARGUMENT", "; ".join(problems)))
                return
            reply: Any = None
            if mock.script is not None:
                try:
                    reply = mock.script(r)
                except Exception as e:  # a broken script must show in the test, not hang it
                    mock.errors.append(f"{type(e).__name__}: {e}")
                    self._send(500, error_body(500, "INTERNAL", f"mock script failed: {e}"))
                    return
            if reply is None:
                reply = Reply(response=response([text(DEFAULT_TEXT)]))
            if isinstance(reply, dict):
                reply = Reply(response=reply)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.response is None:
                self._send(reply.status, reply.body if reply.body is not None else b"")
                return
            mock.note_issued(reply.response)
            if r.action == "streamGenerateContent":
                self._stream(reply)
            else:
                self._send(200, reply.response)

        def do_GET(self) -> None:
            self._record()
            self._send(404, error_body(404, "NOT_FOUND", f"Not found: GET {self.path}"))

        def do_HEAD(self) -> None:
            self._record()
            self._send(404, b"", head_only=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mock-gemini", daemon=True)
    mock = MockGemini(server=server, thread=thread)
    thread.start()
    return mock
