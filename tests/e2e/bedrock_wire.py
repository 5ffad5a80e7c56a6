"""Amazon Bedrock's wire, for the mock upstream: the event-stream frames of
a streamed response (application/vnd.amazon.eventstream: prelude with
lengths and its CRC32, string headers, payload, message CRC32), and the
check of a request's SigV4 signature as AWS does it (service `bedrock`).
Standard library only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
import urllib.parse
import zlib

CONTENT_TYPE = "application/vnd.amazon.eventstream"


def _headers(headers: dict[str, str]) -> bytes:
    out = b""
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        out += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v
    return out


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    h = _headers(headers)
    total = 12 + len(h) + len(payload) + 4
    prelude = struct.pack(">II", total, len(h))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + h + payload
    return body + struct.pack(">I", zlib.crc32(body))


def chunk(event: dict) -> bytes:
    """One Anthropic stream event as Bedrock frames it."""
    data = json.dumps(event).encode()
    payload = json.dumps({"bytes": base64.b64encode(data).decode(), "p": "abcdefghij"}).encode()
    return frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload)


def read_frames(data: bytes) -> list[tuple[dict[str, str], bytes]]:
    """Every frame of ``data`` (checksums verified), as (headers, payload)."""
    out, i = [], 0
    while i < len(data):
        total, hlen = struct.unpack(">II", data[i:i + 8])
        (pcrc,) = struct.unpack(">I", data[i + 8:i + 12])
        assert zlib.crc32(data[i:i + 8]) == pcrc, "prelude CRC"
        msg = data[i:i + total]
        (mcrc,) = struct.unpack(">I", msg[-4:])
        assert zlib.crc32(msg[:-4]) == mcrc, "message CRC"
        headers, j, hend = {}, 12, 12 + hlen
        while j < hend:
            n = msg[j]
            name = msg[j + 1:j + 1 + n].decode()
            j += 1 + n
            kind = msg[j]
            assert kind == 7, f"header type {kind}"
            (vlen,) = struct.unpack(">H", msg[j + 1:j + 3])
            headers[name] = msg[j + 3:j + 3 + vlen].decode()
            j += 3 + vlen
        out.append((headers, msg[hend:-4]))
        i += total
    return out


def events_of(data: bytes) -> list[dict]:
    """The Anthropic events inside a Bedrock stream (an exception frame as
    an ``error`` event)."""
    out = []
    for headers, payload in read_frames(data):
        body = json.loads(payload)
        if headers.get(":message-type") == "event":
            out.append(json.loads(base64.b64decode(body["bytes"])))
        else:
            out.append({"type": "error", "error": {"type": headers.get(":exception-type"),
                                                    "message": body.get("message")}})
    return out


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _encode_path(path: str) -> str:
    # AWS services but S3 encode the (already encoded) path once more.
    return "/".join(urllib.parse.quote(seg, safe="-_.~") for seg in path.split("/"))


def check_sigv4(method: str, path_and_query: str, headers: list[tuple[str, str]], body: bytes,
                access_key: str, secret_key: str, service: str = "bedrock") -> str | None:
    """None when the request carries a valid SigV4 signature by
    ``access_key``; else what is wrong."""
    hmap: dict[str, str] = {}
    for k, v in headers:
        hmap[k.lower()] = v
    auth = hmap.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization header"
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key_id, date, region, svc, term = fields["Credential"].split("/")
    if key_id != access_key or svc != service or term != "aws4_request":
        return f"wrong credential scope {fields['Credential']}"
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed:
        return "host is not signed"
    amz_date = hmap.get("x-amz-date", "")
    path, _, query = path_and_query.partition("?")
    canonical_query = "&".join(sorted(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)))
    canonical_headers = "".join(f"{h}:{' '.join(hmap.get(h, '').split())}\n" for h in signed)
    canonical = "\n".join([method, _encode_path(path), canonical_query, canonical_headers,
                           fields["SignedHeaders"], hashlib.sha256(body).hexdigest()])
    scope = f"{date}/{region}/{svc}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = _sign(("AWS4" + secret_key).encode(), date)
    for part in (region, svc, "aws4_request"):
        k = _sign(k, part)
    want = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, fields["Signature"]):
        return "signature mismatch"
    return None
