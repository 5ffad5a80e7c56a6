#!/usr/bin/env python3
"""How often a stub holds the identifiers the model took from the output it replaced.

Reads agent sessions in OpenAI Chat Completions shape (a folder of
`{"messages": [...]}` files such as Toolathlon's `trajs/`, or one file holding
a list of `{"messages": [...]}` such as LiveMCPBench's baseline output), at
bench time only: nothing read here is kept. For every tool output of at least
`--threshold` characters it runs `toolstub synopsis --json --tool NAME -` and
looks at the model's next assistant message (its text and its tool calls'
arguments):

- a *candidate* is a tool-call argument value (a string of at most 120
  characters, or a number of at least 3 digits), or a token of the message's
  text or arguments that looks like an identifier: at least 3 characters of
  letters, digits and `_ - . : / @ #`, holding a digit, or a `_`, or a
  lower-to-upper case change, or being at least 8 characters of hex;
- it was *taken from the output* when the output holds it (as sent, or with
  its JSON escapes decoded) and no earlier message of the session does (so a
  value the user gave, or one already seen, does not count);
- the stub *holds* it when the stub's text does (JSON escapes decoded too).

Prints, per set: outputs measured, outputs with at least one identifier taken,
identifiers taken, identifiers the stubs hold (and the share), outputs all of
whose identifiers the stub holds, stub sizes (median, p90, max) and kinds.

Usage:
  scripts/identifier_recall.py --bin target/release/toolstub \
      --set toolathlon=/path/to/toolathlon-traj-website/trajs \
      --set livemcpbench=/path/to/livemcpbench-claude-sonnet-4.json:5000
  (`:N` after a path sets that set's threshold; `--threshold` the default,
  20,000 characters, toolstub's default `threshold_chars`.)
  `--misses N` prints N identifiers the stubs miss, with their tool.
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys

TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.:/@#]*[A-Za-z0-9_]")
HEX = re.compile(r"^[0-9a-fA-F]{8,}$")


def looks_like_identifier(tok):
    if len(tok) < 3:
        return False
    if tok.isdigit():
        return len(tok) >= 3
    if any(c.isdigit() for c in tok) or "_" in tok or HEX.match(tok):
        return True
    return re.search(r"[a-z][A-Z]", tok) is not None


def tokens(text):
    return {t for t in TOKEN.findall(text) if looks_like_identifier(t)}


def argument_values(value, out):
    if isinstance(value, dict):
        for v in value.values():
            argument_values(v, out)
    elif isinstance(value, list):
        for v in value:
            argument_values(v, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        s = str(value)
        if len(s.lstrip("-").replace(".", "")) >= 3:
            out.add(s)
    elif isinstance(value, str):
        v = value.strip()
        if 3 <= len(v) <= 120 and "\n" not in v:
            out.add(v)
        out.update(tokens(value))


def candidates(message):
    out = set()
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    if isinstance(content, str):
        out.update(tokens(content))
    for call in message.get("tool_calls") or []:
        args = call.get("function", {}).get("arguments", "")
        try:
            argument_values(json.loads(args), out)
        except (ValueError, TypeError):
            out.update(tokens(str(args)))
    return out


ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def unescape(text):
    def one(m):
        e = m.group(1)
        if e[0] == "u":
            return chr(int(e[1:], 16))
        return SIMPLE[e]

    out = ESCAPE.sub(one, text)
    # Surrogate pairs written as two escapes.
    return out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def decoded(text):
    """`text`, then the same with one and two levels of JSON escapes decoded
    (a JSON text inside a JSON string inside the output)."""
    if "\\" not in text:
        return text
    once = unescape(text)
    return "\n".join([text, once, unescape(once)])


def message_text(m):
    parts = []
    c = m.get("content")
    if isinstance(c, str):
        parts.append(c)
    elif isinstance(c, list):
        parts.extend(json.dumps(p, ensure_ascii=False) for p in c)
    for call in m.get("tool_calls") or []:
        parts.append(json.dumps(call, ensure_ascii=False))
    return "\n".join(parts)


def sessions(path):
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if name.endswith(".json"):
                with open(os.path.join(path, name)) as f:
                    d = json.load(f)
                yield from split_resets(d.get("messages", []))
    else:
        with open(path) as f:
            d = json.load(f)
        for task in d if isinstance(d, list) else [d]:
            yield from split_resets(task.get("messages") or task.get("traj") or [])


def split_resets(messages):
    """Toolathlon continues an overflowed context with a `[Context reset]`
    user message: the model never sees what came before it again."""
    start = 0
    for i, m in enumerate(messages):
        c = m.get("content")
        if m.get("role") == "user" and isinstance(c, str) and c.startswith("[Context reset]"):
            yield messages[start:i]
            start = i
    yield messages[start:]


def stub_of(binary, tool, text):
    out = subprocess.run(
        [binary, "synopsis", "--json", "--tool", tool, "-"],
        input=text.encode("utf-8", "surrogatepass"),
        capture_output=True,
        check=True,
    )
    report = json.loads(out.stdout)
    return report["kind"], report["stub"]


def measure(binary, path, threshold, misses_wanted):
    seen_outputs = 0
    with_ids = 0
    taken = 0
    held = 0
    all_held = 0
    sizes = []
    kinds = collections.Counter()
    misses = []
    for messages in sessions(path):
        names = {}
        history = []
        for i, m in enumerate(messages):
            if m.get("role") == "assistant":
                for call in m.get("tool_calls") or []:
                    names[call.get("id")] = call.get("function", {}).get("name", "tool")
            text = message_text(m)
            if m.get("role") == "tool" and isinstance(m.get("content"), str) and len(m["content"]) >= threshold:
                output = m["content"]
                nxt = next((n for n in messages[i + 1 :] if n.get("role") == "assistant"), None)
                tool = names.get(m.get("tool_call_id"), "tool")
                kind, stub = stub_of(binary, tool, output)
                seen_outputs += 1
                sizes.append(len(stub))
                kinds[kind] += 1
                if nxt is not None:
                    out_text = decoded(output)
                    before = "\n".join(history)
                    ids = [c for c in sorted(candidates(nxt)) if c in out_text and c not in before]
                    stub_text = decoded(stub)
                    if ids:
                        with_ids += 1
                        got = [c for c in ids if c in stub_text]
                        taken += len(ids)
                        held += len(got)
                        all_held += len(got) == len(ids)
                        for c in ids:
                            if c not in stub_text and len(misses) < misses_wanted:
                                misses.append((tool, kind, c))
            history.append(text)
    return {
        "outputs": seen_outputs,
        "outputs_with_identifiers": with_ids,
        "identifiers_taken": taken,
        "identifiers_in_stub": held,
        "share": held / taken if taken else 0.0,
        "outputs_all_held": all_held,
        "stub_chars_median": statistics.median(sizes) if sizes else 0,
        "stub_chars_p90": sorted(sizes)[int(0.9 * (len(sizes) - 1))] if sizes else 0,
        "stub_chars_max": max(sizes) if sizes else 0,
        "kinds": dict(sorted(kinds.items())),
        "misses": misses,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="target/release/toolstub")
    p.add_argument("--set", action="append", required=True, metavar="NAME=PATH[:THRESHOLD]")
    p.add_argument("--threshold", type=int, default=20000)
    p.add_argument("--misses", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    results = {}
    for spec in a.set:
        name, _, path = spec.partition("=")
        threshold = a.threshold
        m = re.match(r"^(.*):(\d+)$", path)
        if m and not os.path.exists(path):
            path, threshold = m.group(1), int(m.group(2))
        results[name] = measure(a.bin, path, threshold, a.misses)
        results[name]["threshold"] = threshold
    if a.json:
        json.dump(results, sys.stdout, indent=1)
        print()
        return
    for name, r in results.items():
        print(f"{name} (outputs of at least {r['threshold']} characters):")
        print(f"  outputs measured: {r['outputs']}; with an identifier taken: {r['outputs_with_identifiers']}")
        share = 100 * r["share"]
        print(f"  identifiers taken: {r['identifiers_taken']}; in the stub: {r['identifiers_in_stub']} ({share:.1f}%)")
        print(f"  outputs whose stub holds every identifier taken: {r['outputs_all_held']}")
        print(
            f"  stub characters: median {r['stub_chars_median']}, p90 {r['stub_chars_p90']}, max {r['stub_chars_max']}"
        )
        print(f"  kinds: {r['kinds']}")
        for tool, kind, c in r["misses"]:
            print(f"  miss: {tool} ({kind}): {c[:100]!r}")


if __name__ == "__main__":
    main()
