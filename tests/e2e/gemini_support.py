"""What the Gemini e2e tests share (Gemini CLI and the google-genai SDK): the
checks of a rewritten request and of a recall round, as the upstream saw
them."""

from __future__ import annotations

import json
import subprocess

import mock_gemini as mg
from anthropic_support import RECALL_TOOLS, ordered, tenant_of


def recall_tool(body: dict) -> dict | None:
    """The Tool the proxy added (the last one, declaring the recall tools)."""
    tools = body.get("tools") or []
    if tools and [d.get("name") for d in tools[-1].get("functionDeclarations") or []] == RECALL_TOOLS:
        return tools[-1]
    return None


def check_recall_tools(body: dict, client_tools: list, *, key_order: bool = True) -> None:
    """The client's Tools unchanged and first (``key_order``: in the same
    key order too), then one Tool declaring the three recall tools with
    JSON Schema parameters."""
    tools = body["tools"]
    if key_order:
        assert ordered(tools[:-1]) == ordered(client_tools), "the client's tools unchanged"
    else:
        assert json.dumps(tools[:-1], sort_keys=True) == json.dumps(client_tools, sort_keys=True), tools[:-1]
    added = recall_tool(body)
    assert added is not None, [d.get("name") for d in mg.declarations(body)]
    assert list(added) == ["functionDeclarations"], added
    for d in added["functionDeclarations"]:
        assert set(d) == {"name", "description", "parametersJsonSchema"}, d
        assert d["description"] and d["parametersJsonSchema"]["type"] == "object"
    read = added["functionDeclarations"][0]["parametersJsonSchema"]
    assert {"ref", "offset", "limit"} <= set(read["properties"]) and "ref" in read["required"], read


def stored(proxy, ref: str, key: str) -> str:
    """The original the proxy stored under ``ref`` for ``key``'s tenant."""
    out = subprocess.run(
        [str(proxy.binary), "results", "read", "--db", str(proxy.db), "--ref", ref, "--tenant", tenant_of(key),
         "--limit", "-1", "--json"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["content"]


def check_recall_round(first: mg.Recorded, second: mg.Recorded, round1_parts: list[dict],
                       recall_ids: list[str]) -> list[dict]:
    """Round 2 upstream is round 1's body plus round 1's model content (its
    parts as the upstream sent them, signatures included) and a user content
    with one functionResponse per recall call. Returns the parsed results."""
    r1, r2 = first.json, second.json
    assert second.header("content-length") == str(len(second.body))
    assert len(r2["contents"]) == len(r1["contents"]) + 2, [c["role"] for c in r2["contents"]]
    trimmed = dict(r2)
    trimmed["contents"] = r2["contents"][:-2]
    assert ordered(trimmed) == ordered(r1), "round 2 must resend round 1's body unchanged"
    model, user = r2["contents"][-2:]
    assert ordered(model) == ordered({"role": "model", "parts": round1_parts}), \
        "round 1's model content, as the upstream sent it, in round 2"
    assert user["role"] == "user"
    answers = [p["functionResponse"] for p in user["parts"]]
    assert [a.get("id") for a in answers] == recall_ids, answers
    results = []
    for a in answers:
        assert set(a) <= {"id", "name", "response"} and a["name"] in RECALL_TOOLS, a
        assert list(a["response"]) == ["output"], a
        results.append(json.loads(a["response"]["output"]))
    return results
