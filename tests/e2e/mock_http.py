"""HTTP plumbing shared by the mock upstreams (mock_upstream.py,
mock_anthropic.py, mock_responses.py): reading a request body whether it
comes with Content-Length or chunked (the proxy streams large bodies
chunked)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The whole request body of `handler`'s current request."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        out = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""
