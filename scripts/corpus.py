#!/usr/bin/env python3
"""Builds, at test time, a labelled corpus of real tool outputs found on this machine.

    python3 scripts/corpus.py --out DIR

Runs real commands and reads real files where they are (nothing third-party is
copied into the repository), writes each sample as a file in DIR and writes
DIR/manifest.json:

    {"samples": [{"file", "expected", "category", "source"}, ...],
     "skipped": [{"category", "reason"}, ...]}

What this machine lacks (a command, a directory, a language) is skipped,
reported on stderr and listed under "skipped". Standard library only.

LABELS are what a careful human says the content is, never what the detector
outputs:
  - source code in any language (Python, Rust, C, C++, shell with a shebang,
    JavaScript, Perl, Java, Go, PHP, C#, SQL, Tcl, ...)      -> code
  - JSON, pretty-printed or compact, and JSON Lines           -> json
  - JSON cut off in the middle (no longer parses)             -> text
  - comma-separated tables (at least two columns)             -> csv
  - tab-separated tables (at least two columns)               -> tsv
    (a file named .csv but delimited by colons or semicolons is
    neither: text; a one-column "table" is a list of words)
  - YAML configuration files and CI workflows                 -> yaml
  - XML documents, SVG images, fontconfig files               -> xml
  - man pages (rendered, or raw troff source), --help output,
    logs, git log / git diff / patches, tracebacks and stack
    traces, compiler diagnostics (coloured or not), Markdown,
    ls / ps / df / free and similar listings, plain documents
    (licences, copyright files), other configuration formats
    (TOML, INI, nsswitch.conf)                                -> text
  - raw binary bytes and empty output                         -> unknown
  - an output an agent wrapped (Claude Code's numbered Read
    listing or `cat -n` of a file, Codex's header around a
    command's output, Claude Code's `Exit code N` line)        -> the kind of
    the content inside, by the rules above (a listing of a JSON file is json;
    Codex's cut of the middle of a JSON output is JSON cut off: text)
Structured-data fixtures under test directories are not sampled: they are
often deliberately invalid, and they are not what tools print. Files named
.json that Python's json module rejects (JSON with comments, templates) and
.xml/.svg files that expat rejects are not sampled either: whether they are
JSON or XML is a matter of opinion. A .yml file holding only comments is
labelled text (there is no YAML content in it).

Selection is deterministic on one machine: directory trees are walked in sorted
order, at most a few files per directory, whole files only (between
MIN_FILE_BYTES and MAX_FILE_BYTES), at most CATEGORY_CAP samples per category
(CORPUS_CATEGORY_CAP and CORPUS_CODE_CAP raise the caps to explore a larger
sample). No sample is ever dropped because of what the detector says about it.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
import zipfile

MAX_FILE_BYTES = 200_000
# Files smaller than this are not sampled: a proxy does not externalize
# outputs that small, and a line or two is too little for anyone to tell a
# kind from (`pub mod parser;`, `github: [x]`, `#include "sqlite3.h"`).
MIN_FILE_BYTES = 200
# Command output is capped too (at a line break, as `head -c` would), except
# JSON output, which is never cut (cutting it changes its kind).
MAX_OUTPUT_BYTES = 200_000
MAX_JSON_OUTPUT_BYTES = 4_000_000
CATEGORY_CAP = int(os.environ.get("CORPUS_CATEGORY_CAP", "25"))  # raise it to explore
CODE_LANGUAGE_CAP = int(os.environ.get("CORPUS_CODE_CAP", "10"))
SMALL_CAP = max(1, CATEGORY_CAP * 2 // 5)  # categories that need fewer samples
COMMAND_TIMEOUT = 30
HOME = os.path.expanduser("~")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Directory names whose files are test fixtures or vendored noise.
FIXTURE_DIRS = {"test", "tests", "testdata", "test-data", "fixtures", "fixture", "testing", "__pycache__", ".git"}
# Trees not worth walking (huge, or not part of "this kind of machine").
WALK_EXCLUDE = {"/usr/share/package-lists", "/usr/lib/x86_64-linux-gnu", "/usr/lib/jvm", "/usr/share/icons/Adwaita/cursors"}


def log(msg):
    print(f"corpus: {msg}", file=sys.stderr)


def clean_env(**extra):
    """The environment for child commands: no cargo jobserver or build-script
    variables inherited from `cargo test`, a fixed locale and width."""
    env = {}
    for key, value in os.environ.items():
        if key.startswith("CARGO_") and key != "CARGO_HOME":
            continue
        if key in ("MAKEFLAGS", "MFLAGS", "RUSTC_WRAPPER", "RUSTFLAGS", "RUST_BACKTRACE"):
            continue
        env[key] = value
    env["LC_ALL"] = "C.UTF-8"
    env["LANG"] = "C.UTF-8"
    env["MANWIDTH"] = "80"
    env["COLUMNS"] = "100"
    env["TERM"] = "xterm-256color"
    # No network: no update or version checks.
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["NO_UPDATE_NOTIFIER"] = "1"
    env["npm_config_update_notifier"] = "false"
    env["npm_config_fund"] = "false"
    env.update(extra)
    return env


class Corpus:
    def __init__(self, out):
        self.out = out
        self.samples = []
        self.skipped = []
        self.counts = {}

    def full(self, category, cap=CATEGORY_CAP):
        return self.counts.get(category, 0) >= cap

    def add(self, category, expected, source, data, cap=CATEGORY_CAP):
        if self.full(category, cap):
            return False
        if isinstance(data, str):
            data = data.encode("utf-8")
        index = len(self.samples)
        name = f"{index:04d}-{category}.out"
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)
        self.samples.append({"file": name, "expected": expected, "category": category, "source": source})
        self.counts[category] = self.counts.get(category, 0) + 1
        return True

    def skip(self, category, reason):
        log(f"skipped {category}: {reason}")
        self.skipped.append({"category": category, "reason": reason})

    def write_manifest(self):
        with open(os.path.join(self.out, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"samples": self.samples, "skipped": self.skipped}, f, indent=1)


def run(cmd, cwd=None, env=None, stdin=None, stderr=False, ok_codes=None, timeout=COMMAND_TIMEOUT):
    """Runs `cmd`; returns stdout (or stderr when `stderr` is set, or both with
    stderr="both") as bytes, or None when the command is missing, times out or
    exits with a code outside `ok_codes` (any code when it is None)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=env or clean_env(),
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as err:
        log(f"{' '.join(cmd)}: {err}")
        return None
    if ok_codes is not None and proc.returncode not in ok_codes:
        log(f"{' '.join(cmd)}: exit {proc.returncode}")
        return None
    if stderr == "both":
        return proc.stdout + proc.stderr
    return proc.stderr if stderr else proc.stdout


def cap_text(data, limit=MAX_OUTPUT_BYTES):
    """Cuts text output at the last line break before `limit` bytes."""
    if len(data) <= limit:
        return data
    cut = data.rfind(b"\n", 0, limit)
    return data[: cut + 1 if cut > 0 else limit]


def read(path, limit=MAX_FILE_BYTES):
    try:
        if not os.path.isfile(path) or not MIN_FILE_BYTES <= os.path.getsize(path) <= limit:
            return None
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


class FileIndex:
    """One sorted walk over the interesting trees, remembering files by suffix."""

    def __init__(self, roots, suffixes, deadline_seconds=20.0):
        self.by_suffix = {s: [] for s in suffixes}
        self.no_suffix = []  # files without an extension under /usr/include/c++
        start = time.monotonic()
        for root in roots:
            if not os.path.isdir(root):
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                if time.monotonic() - start > deadline_seconds:
                    log("file walk deadline reached; the index is partial")
                    return
                dirnames[:] = sorted(
                    d for d in dirnames if os.path.join(dirpath, d) not in WALK_EXCLUDE and not d.startswith(".") or d in (".github",)
                )
                for name in sorted(filenames):
                    lower = name.lower()
                    dot = lower.rfind(".")
                    if dot > 0:
                        suffix = lower[dot + 1 :]
                        if suffix in self.by_suffix:
                            self.by_suffix[suffix].append(os.path.join(dirpath, name))
                    elif "/include/c++/" in dirpath:
                        self.no_suffix.append(os.path.join(dirpath, name))

    def files(self, suffixes, under=None, per_dir=1, skip_fixtures=True, where=None):
        """Candidates with one of `suffixes`, in sorted order, at most `per_dir`
        per directory, optionally only under the prefixes in `under`."""
        paths = []
        for s in suffixes:
            paths.extend(self.by_suffix.get(s, []))
        paths.sort()
        taken = {}
        for path in paths:
            if under and not any(path.startswith(u) for u in under):
                continue
            parts = path.split("/")
            if skip_fixtures and any(p.lower() in FIXTURE_DIRS for p in parts[:-1]):
                continue
            if where and not where(path):
                continue
            directory = os.path.dirname(path)
            if taken.get(directory, 0) >= per_dir:
                continue
            taken[directory] = taken.get(directory, 0) + 1
            yield path


def is_strict_json(data):
    """Files named .json that Python's json module rejects (JSON with comments,
    templates) are not sampled: whether they are JSON is a matter of opinion."""
    try:
        json.loads(data.decode("utf-8-sig"))
        return True
    except ValueError:
        return False


def is_well_formed_xml(data):
    """The same for XML: only documents that expat accepts are sampled."""
    try:
        ElementTree.fromstring(data)
        return True
    except (ElementTree.ParseError, ValueError):
        return False


def only_comments(data):
    """A YAML file holding nothing but comments is a comment block: text."""
    lines = data.decode("utf-8", "replace").splitlines()
    if all(not l.strip() or l.lstrip().startswith("#") for l in lines):
        return "text"
    return None


def spread(groups, limit):
    """Round-robin over candidate lists so that no single tree fills a category."""
    iters = [iter(g) for g in groups]
    out = []
    while iters and len(out) < limit:
        alive = []
        for it in iters:
            item = next(it, None)
            if item is not None:
                out.append(item)
                alive.append(it)
                if len(out) >= limit:
                    break
        iters = alive
    return out


def add_files(corpus, category, expected, paths, cap=CATEGORY_CAP, check=None, relabel=None):
    """Adds whole files. `check` excludes files that are not what the category
    is about (decided by an independent parser, never by the detector);
    `relabel` gives a different honest label to some files."""
    added = 0
    for path in paths:
        if corpus.full(category, cap):
            break
        data = read(path)
        if not data or (check and not check(data)):
            continue
        label = (relabel and relabel(data)) or expected
        if corpus.add(category, label, path, data, cap):
            added += 1
    if added == 0:
        corpus.skip(category, "no suitable files on this machine")
    return added


def add_command(corpus, category, expected, cmd, cwd=None, env=None, stderr=False, json_output=False, ok_codes=None, source=None):
    data = run(cmd, cwd=cwd, env=env, stderr=stderr, ok_codes=ok_codes)
    label = source or " ".join(cmd)
    if data is None:
        corpus.skip(category, f"`{label}` unavailable")
        return None
    if json_output:
        if len(data) > MAX_JSON_OUTPUT_BYTES:
            corpus.skip(category, f"`{label}` output too large")
            return None
    else:
        data = cap_text(data)
    if not data.strip() and expected != "unknown":
        corpus.skip(category, f"`{label}` printed nothing")
        return None
    corpus.add(category, expected, label, data)
    return data


# ---------------------------------------------------------------- throwaway crates

CRATE_SOURCES = {
    "clean": 'pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n',
    "warnings": (
        "use std::collections::HashMap;\n\n"
        "pub fn unused_things() -> u32 {\n    let x = 5;\n    let mut y = 3;\n    y + 1\n}\n\n"
        "fn never_called() {}\n"
    ),
    "errors": (
        "pub fn broken(v: Vec<u32>) -> String {\n    let n: u32 = \"not a number\";\n"
        "    let s: String = v.len();\n    undefined_function(n);\n    s\n}\n\n"
        "pub struct S;\nimpl S {\n    pub fn m(&self) -> u8 { self.missing }\n}\n"
    ),
    "panics": 'fn main() {\n    let v: Vec<u32> = Vec::new();\n    inner(&v);\n}\n\nfn inner(v: &[u32]) {\n    let _ = v[3];\n}\n',
}


def make_crate(root, name, source):
    path = os.path.join(root, "crates", name)
    os.makedirs(os.path.join(path, "src"), exist_ok=True)
    is_bin = name == "panics"
    with open(os.path.join(path, "Cargo.toml"), "w") as f:
        f.write(f'[package]\nname = "corpus_{name}"\nversion = "0.1.0"\nedition = "2021"\n\n[workspace]\n')
    with open(os.path.join(path, "src", "main.rs" if is_bin else "lib.rs"), "w") as f:
        f.write(source)
    return path


def cargo_samples(corpus, out):
    if shutil.which("cargo") is None:
        for c in ("json-cargo", "jsonl-cargo", "ansi-compiler", "compiler-plain"):
            corpus.skip(c, "cargo missing")
        return
    target = os.path.join(out, "cargo-target")
    env = clean_env(CARGO_TARGET_DIR=target, CARGO_TERM_COLOR="never")
    crates = {name: make_crate(out, name, src) for name, src in CRATE_SOURCES.items()}

    # cargo metadata on the project itself (no build, no target-dir lock) and on a throwaway crate.
    add_command(corpus, "json-cargo", "json", ["cargo", "metadata", "--offline", "--format-version", "1"], cwd=REPO, env=env, json_output=True, ok_codes=[0])
    add_command(corpus, "json-cargo", "json", ["cargo", "metadata", "--offline", "--no-deps", "--format-version", "1"], cwd=REPO, env=env, json_output=True, ok_codes=[0])
    add_command(corpus, "json-cargo", "json", ["cargo", "metadata", "--offline", "--format-version", "1"], cwd=crates["clean"], env=env, json_output=True, ok_codes=[0], source="cargo metadata (throwaway crate)")
    add_command(corpus, "json-cargo", "json", ["cargo", "locate-project"], cwd=REPO, env=env, json_output=True, ok_codes=[0])

    for name in ("clean", "warnings", "errors"):
        add_command(corpus, "jsonl-cargo", "json", ["cargo", "check", "--offline", "--message-format=json"], cwd=crates[name], env=env, json_output=True, source=f"cargo check --message-format=json ({name} crate)")
        add_command(corpus, "jsonl-cargo", "json", ["cargo", "build", "--offline", "--message-format=json-diagnostic-rendered-ansi"], cwd=crates[name], env=env, json_output=True, source=f"cargo build --message-format=json-diagnostic-rendered-ansi ({name} crate)")
    for name in ("warnings", "errors"):
        add_command(corpus, "compiler-plain", "text", ["cargo", "check", "--offline", "--color=never"], cwd=crates[name], env=env, stderr=True, source=f"cargo check ({name} crate)")
        add_command(corpus, "ansi-compiler", "text", ["cargo", "check", "--offline", "--color=always"], cwd=crates[name], env=env, stderr=True, source=f"cargo check --color=always ({name} crate)")
        add_command(corpus, "ansi-compiler", "text", ["cargo", "clippy", "--offline", "--color=always"], cwd=crates[name], env=env, stderr=True, source=f"cargo clippy --color=always ({name} crate)")
    # Empty stdout of a successful quiet check.
    add_command(corpus, "empty", "unknown", ["cargo", "check", "--offline", "-q"], cwd=crates["clean"], env=env, source="cargo check -q (clean crate, stdout)")
    # A Rust panic with a backtrace.
    add_command(corpus, "traceback", "text", ["cargo", "run", "--offline", "-q"], cwd=crates["panics"], env=clean_env(CARGO_TARGET_DIR=target, RUST_BACKTRACE="1"), stderr=True, source="cargo run (index out of bounds panic, RUST_BACKTRACE=1)")

    meta = run(["cargo", "metadata", "--offline", "--format-version", "1"], cwd=REPO, env=env, ok_codes=[0])
    if meta and shutil.which("jq"):
        add_command_stdin(corpus, "jsonl-tools", "json", ["jq", "-c", ".packages[] | {name, version, license, edition}"], meta, "cargo metadata | jq -c '.packages[]|{...}'")
        add_command_stdin(corpus, "jsonl-tools", "json", ["jq", "-c", ".packages[].targets[]"], meta, "cargo metadata | jq -c '.packages[].targets[]'")
        add_command_stdin(corpus, "csv-tools", "csv", ["jq", "-r", '["name","version","license","edition"], (.packages[] | [.name, .version, .license, .edition]) | @csv'], meta, "cargo metadata | jq -r @csv")
        add_command_stdin(corpus, "tsv-tools", "tsv", ["jq", "-r", '["name","version","source"], (.packages[] | [.name, .version, (.source // "local")]) | @tsv'], meta, "cargo metadata | jq -r @tsv")
        add_command_stdin(corpus, "json-cargo", "json", ["jq", ".packages[0], .packages[1]"], meta, "cargo metadata | jq '.packages[0], .packages[1]' (a stream of two pretty values)")
    if meta:
        add_truncated(corpus, meta, "cargo metadata")

    if shutil.which("cargo"):
        add_command(corpus, "listing", "text", ["cargo", "tree", "--offline"], cwd=REPO, env=env)
        add_command(corpus, "listing", "text", ["cargo", "tree", "--offline", "-e", "normal", "--prefix", "depth"], cwd=REPO, env=env)


def add_command_stdin(corpus, category, expected, cmd, stdin, source):
    data = run(cmd, stdin=stdin, ok_codes=[0])
    if not data or not data.strip():
        corpus.skip(category, f"`{source}` unavailable")
        return
    corpus.add(category, expected, source, data if expected == "json" else cap_text(data))


def add_truncated(corpus, data, source):
    """Real JSON cut in the middle, as a harness caps an output: read as JSON
    as far as it goes (what was whole before the cut), so json."""
    text = data.decode("utf-8", "replace")
    for fraction in (0.5, 0.3):
        cut = int(len(text) * fraction)
        piece = text[:cut]
        if piece.strip():
            corpus.add("truncated-json", "json", f"{source} cut at {int(fraction * 100)}%", piece)


# ---------------------------------------------------------------- python, node

def python_samples(corpus, index):
    py = sys.executable or "python3"
    add_command(corpus, "json-pip", "json", [py, "-m", "pip", "inspect"], json_output=True, ok_codes=[0], source="pip inspect")
    add_command(corpus, "json-pip", "json", [py, "-m", "pip", "list", "--format=json"], json_output=True, ok_codes=[0], source="pip list --format=json")
    add_command(corpus, "listing", "text", [py, "-m", "pip", "list"], ok_codes=[0], source="pip list")
    add_command(corpus, "listing", "text", [py, "-m", "pip", "freeze"], ok_codes=[0], source="pip freeze")
    inspect = run([py, "-m", "pip", "inspect"], ok_codes=[0])
    if inspect:
        add_truncated(corpus, inspect, "pip inspect")
    # JSON files shipped in site-packages and /usr/share.
    site = [p for p in sys.path if p.endswith("site-packages")]
    json_files = spread(
        [index.files(["json"], under=site), index.files(["json"], under=["/usr/share"]), index.files(["json"], under=["/usr/lib/node_modules", HOME + "/.cargo/registry/src"])],
        CATEGORY_CAP * 3,
    )
    add_files(corpus, "json-files", "json", json_files, check=is_strict_json)

    tracebacks = {
        "nested ValueError": "def parse(x):\n    return int(x)\n\ndef load(items):\n    return [parse(i) for i in items]\n\ndef main():\n    load(['1', '2', 'three'])\n\nmain()\n",
        "chained KeyError": "import json\n\ndef lookup(d, k):\n    try:\n        return d[k]\n    except KeyError as e:\n        raise RuntimeError(f'missing {k}') from e\n\nlookup(json.loads('{\"a\": 1}'), 'b')\n",
        "recursion": "def f(n):\n    return f(n + 1)\n\nf(0)\n",
        "attribute error in class": "class Store:\n    def __init__(self):\n        self.items = None\n\n    def count(self):\n        return len(self.items.keys())\n\nStore().count()\n",
        "import error": "import definitely_not_an_installed_module_xyz\n",
        "zero division in lambda": "data = [3, 0]\nprint(list(map(lambda d: 10 / d, data)))\n",
        "during handling": "try:\n    open('/nonexistent/file.txt')\nexcept OSError:\n    {}['k']\n",
    }
    for name, code in tracebacks.items():
        data = run([py, "-c", code], stderr=True)
        if data:
            corpus.add("traceback", "text", f"python3 -c ({name})", data)
    data = run([py, "-m", "json.tool"], stdin=b'{"a": 1,, "b": 2}', stderr=True)
    if data:
        corpus.add("traceback", "text", "python3 -m json.tool (invalid input)", data)
    for cmd, src in (([py, "--help"], "python3 --help"), ([py, "-m", "pip", "--help"], "pip --help")):
        add_command(corpus, "help", "text", cmd, source=src)
    add_command(corpus, "listing", "text", [py, "-m", "pydoc", "json"], source="python3 -m pydoc json")


def node_samples(corpus, index):
    if shutil.which("node") is None or shutil.which("npm") is None:
        for c in ("json-npm", "code-js"):
            corpus.skip(c, "node/npm missing")
        return
    add_command(corpus, "json-npm", "json", ["npm", "ls", "-g", "--json"], json_output=True)
    add_command(corpus, "json-npm", "json", ["npm", "ls", "-g", "--json", "--long"], json_output=True)
    add_command(corpus, "json-npm", "json", ["npm", "config", "list", "--json"], json_output=True)
    add_command(corpus, "json-npm", "json", ["node", "-p", "JSON.stringify(process.versions, null, 2)"], json_output=True)
    add_command(corpus, "json-npm", "json", ["node", "-p", "JSON.stringify(process.config)"], json_output=True)
    add_command(corpus, "listing", "text", ["npm", "ls", "-g"])
    npm_root = run(["npm", "root", "-g"])
    roots = ["/usr/lib/node_modules", "/usr/local/lib/node_modules"]
    if npm_root:
        roots.insert(0, npm_root.decode().strip())
    pkgs = [p for p in index.files(["json"], under=roots, per_dir=1) if p.endswith("/package.json")]
    for path in pkgs:
        if corpus.full("json-npm"):
            break
        data = read(path)
        if data and is_strict_json(data):
            corpus.add("json-npm", "json", path, data)
    big = run(["npm", "ls", "-g", "--json", "--long"])
    if big:
        add_truncated(corpus, big, "npm ls -g --json --long")
    data = run(["node", "-e", "function a(){ b(); }\nfunction b(){ null.x; }\na();"], stderr=True)
    if data:
        corpus.add("traceback", "text", "node -e (TypeError stack trace)", data)
    data = run(["node", "-e", "Promise.reject(new Error('boom in promise'))"], stderr=True)
    if data:
        corpus.add("traceback", "text", "node -e (unhandled rejection)", data)
    add_command(corpus, "help", "text", ["node", "--help"])
    add_command(corpus, "help", "text", ["npm", "help", "ls"])


# ---------------------------------------------------------------- files by kind

def table_samples(corpus, index):
    roots = ["/usr/share", "/usr/lib/python3", HOME + "/.cargo/registry/src"] + [p for p in sys.path if p.endswith("site-packages")]
    for suffix, kind in (("csv", "csv"), ("tsv", "tsv")):
        files = list(index.files([suffix], under=roots, per_dir=3, skip_fixtures=False))
        category = f"{kind}-files"
        added = 0
        for path in files:
            if corpus.full(category):
                break
            data = read(path)
            if data is None:
                # A large table: what `head -n 60` prints is still a table.
                try:
                    with open(path, "rb") as f:
                        data = b"".join(f.readline() for _ in range(60))
                    source = f"head -n 60 {path}"
                except OSError:
                    continue
            else:
                source = path
            label = kind
            sniff = data[:4000].decode("utf-8", "replace")
            first = sniff.split("\n", 1)[0]
            if kind == "csv" and "," not in first:
                # Named .csv but delimited otherwise (colons, semicolons): not CSV, not TSV.
                label = "tsv" if "\t" in first else "text"
            if data.strip() and corpus.add(category, label, source, data):
                added += 1
        if added == 0:
            corpus.skip(category, f"no *.{suffix} files on this machine")

    # Tables printed by tools.
    if shutil.which("sqlite3"):
        # Multi-column lists only: a one-column "table" is just a list of words.
        for pragma in ("pragma_function_list", "pragma_collation_list"):
            add_command(corpus, "csv-tools", "csv", ["sqlite3", "-csv", "-header", ":memory:", f"select * from {pragma}"], source=f"sqlite3 -csv -header 'select * from {pragma}'")
            add_command(corpus, "tsv-tools", "tsv", ["sqlite3", "-tabs", "-header", ":memory:", f"select * from {pragma}"], source=f"sqlite3 -tabs -header 'select * from {pragma}'")
    else:
        corpus.skip("csv-tools (sqlite3)", "sqlite3 missing")
    if shutil.which("dpkg-query"):
        add_command(corpus, "tsv-tools", "tsv", ["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${Installed-Size}\\t${Architecture}\\n"], source="dpkg-query -W -f (tab-separated)")
        add_command(corpus, "csv-tools", "csv", ["dpkg-query", "-W", "-f=${Package},${Version},${Installed-Size},${Architecture}\\n"], source="dpkg-query -W -f (comma-separated)")
    pip_json = run([sys.executable or "python3", "-m", "pip", "list", "--format=json"], ok_codes=[0])
    if pip_json and shutil.which("jq"):
        add_command_stdin(corpus, "tsv-tools", "tsv", ["jq", "-r", ".[] | [.name, .version] | @tsv"], pip_json, "pip list --format=json | jq -r @tsv (no header)")
        add_command_stdin(corpus, "csv-tools", "csv", ["jq", "-r", ".[] | [.name, .version] | @csv"], pip_json, "pip list --format=json | jq -r @csv (no header)")


def yaml_samples(corpus, index):
    site = [p for p in sys.path if p.endswith("site-packages")]
    is_ci = lambda p: "/.github/" in p or "/.gitlab" in p or ".travis" in p or "/.circleci/" in p  # noqa: E731
    ci = spread(
        [index.files(["yml", "yaml"], under=[HOME + "/.cargo/registry/src"], where=is_ci), index.files(["yml", "yaml"], under=[HOME + "/.pyenv"], where=is_ci)],
        CATEGORY_CAP * 3,
    )
    add_files(corpus, "yaml-ci", "yaml", ci, relabel=only_comments)
    configs = spread(
        [
            index.files(["yml", "yaml"], under=[HOME + "/.cargo/registry/src"], where=lambda p: not is_ci(p)),
            index.files(["yml", "yaml"], under=["/usr/share", "/etc"] + site),
            index.files(["yml", "yaml"], under=["/usr/lib"]),
        ],
        CATEGORY_CAP * 3,
    )
    add_files(corpus, "yaml-files", "yaml", configs, relabel=only_comments)


def xml_samples(corpus, index):
    xml = spread(
        [index.files(["xml"], under=["/usr/share/mime"]), index.files(["xml"], under=["/usr/share"], where=lambda p: "/usr/share/mime" not in p), index.files(["xml"], under=[HOME + "/.cargo/registry/src", "/usr/lib", "/etc"])],
        CATEGORY_CAP * 3,
    )
    add_files(corpus, "xml-files", "xml", xml, check=is_well_formed_xml)
    svg = spread([index.files(["svg"], under=["/usr/share"]), index.files(["svg"], under=[HOME + "/.rustup", "/usr/lib", HOME + "/.cargo/registry/src"])], CATEGORY_CAP * 3)
    add_files(corpus, "svg-files", "xml", svg, check=is_well_formed_xml)
    fonts = sorted(os.path.join("/etc/fonts/conf.d", f) for f in os.listdir("/etc/fonts/conf.d")) if os.path.isdir("/etc/fonts/conf.d") else []
    add_files(corpus, "xml-fontconfig", "xml", ["/etc/fonts/fonts.conf"] + fonts, cap=8, check=is_well_formed_xml)


def code_samples(corpus, index):
    reg = HOME + "/.cargo/registry/src"
    py_stdlib = sorted(d for d in ("/usr/lib/python3.11", "/usr/lib/python3") if os.path.isdir(d))
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    own_stdlib = os.path.join(sys.base_prefix, "lib", pyver)
    langs = [
        ("code-python", ["py"], [own_stdlib] + py_stdlib, 3),
        ("code-rust", ["rs"], [reg], 1),
        ("code-c", ["c"], [reg, "/usr/share", "/usr/lib"], 1),
        ("code-c-header", ["h"], ["/usr/include", reg], 2),
        ("code-cpp", ["hpp", "cpp", "cc", "cxx", "hh"], [reg, "/usr/include", "/usr/lib", "/usr/share"], 1),
        ("code-js", ["js", "mjs", "cjs"], ["/usr/lib/node_modules", "/usr/local/lib/node_modules", "/usr/share"], 1),
        ("code-ts", ["ts", "tsx"], ["/usr/lib/node_modules", reg], 1),
        ("code-perl", ["pm", "pl"], ["/usr/share/perl", "/usr/share/perl5", "/usr/lib"], 2),
        ("code-go", ["go"], ["/usr/share", "/usr/lib", reg, HOME + "/go"], 2),
        ("code-ruby", ["rb"], ["/usr/share", "/usr/lib", HOME], 1),
        ("code-php", ["php"], ["/usr/share", "/usr/lib", reg], 1),
        ("code-sql", ["sql"], ["/usr/share", "/usr/lib", reg], 2),
        ("code-tcl", ["tcl"], ["/usr/share", "/usr/lib"], 2),
        ("code-lua", ["lua"], ["/usr/share", "/usr/lib", reg], 1),
    ]
    for category, suffixes, roots, per_dir in langs:
        groups = [index.files(suffixes, under=[r], per_dir=per_dir) for r in roots]
        paths = spread(groups, 200)
        if category == "code-ts":
            paths = [p for p in paths if not p.endswith(".d.ts")] + [p for p in paths if p.endswith(".d.ts")]
        add_files(corpus, category, "code", paths, cap=CODE_LANGUAGE_CAP)
    # C#: `.cs` is also the Czech language suffix (vim tutors, groff hyphenation):
    # only files that declare C# code count.
    cs = spread([index.files(["cs"], under=[r], per_dir=1) for r in ["/usr/lib", "/usr/share", reg]], 50)
    add_files(corpus, "code-csharp", "code", cs, cap=CODE_LANGUAGE_CAP, check=lambda d: b"using System" in d or b"namespace " in d)
    # C++ standard headers have no suffix.
    cpp = [p for p in index.no_suffix if p.count("/") == 5][:40]
    add_files(corpus, "code-cpp-std", "code", cpp, cap=6)
    # Java: the JDK ships its sources in lib/src.zip.
    java_added = 0
    for jdk in sorted(os.listdir("/usr/lib/jvm")) if os.path.isdir("/usr/lib/jvm") else []:
        src = os.path.join("/usr/lib/jvm", jdk, "lib", "src.zip")
        if not os.path.isfile(src) or java_added:
            continue
        try:
            with zipfile.ZipFile(src) as z:
                names = sorted(n for n in z.namelist() if n.endswith(".java") and n.startswith("java.base/java/util/") and n.count("/") == 3)
                for name in names[:: max(1, len(names) // CODE_LANGUAGE_CAP)]:
                    info = z.getinfo(name)
                    if info.file_size > MAX_FILE_BYTES:
                        continue
                    if corpus.add("code-java", "code", f"{src}!{name}", z.read(name), cap=CODE_LANGUAGE_CAP):
                        java_added += 1
        except (OSError, zipfile.BadZipFile):
            continue
    if java_added == 0:
        corpus.skip("code-java", "no Java sources on this machine")
    # Shell scripts with a shebang in /usr/bin.
    shell = []
    if os.path.isdir("/usr/bin"):
        for name in sorted(os.listdir("/usr/bin")):
            path = os.path.join("/usr/bin", name)
            if os.path.islink(path):
                continue
            try:
                with open(path, "rb") as f:
                    head = f.read(32)
            except OSError:
                continue
            if head.startswith((b"#!/bin/sh", b"#!/bin/bash", b"#! /bin/sh", b"#!/usr/bin/env bash", b"#!/usr/bin/env sh")):
                shell.append(path)
    add_files(corpus, "code-shell", "code", shell[:: max(1, len(shell) // 12)], cap=CODE_LANGUAGE_CAP)
    # Scripts in other languages with a shebang.
    scripts = []
    if os.path.isdir("/usr/bin"):
        for name in sorted(os.listdir("/usr/bin")):
            path = os.path.join("/usr/bin", name)
            if os.path.islink(path):
                continue
            try:
                with open(path, "rb") as f:
                    head = f.read(40)
            except OSError:
                continue
            if head.startswith(b"#!") and (b"python" in head or b"perl" in head):
                scripts.append(path)
    add_files(corpus, "code-scripts", "code", scripts[:: max(1, len(scripts) // 10)], cap=8)
    # Code printed by git.
    if shutil.which("git"):
        for path in ("src/synopsis/mod.rs", "src/synopsis/json.rs", "src/stub.rs"):
            add_command(corpus, "code-git-show", "code", ["git", "show", f"HEAD:{path}"], cwd=REPO, ok_codes=[0], source=f"git show HEAD:{path}")


def text_samples(corpus, index):
    # Man pages, rendered and raw troff.
    pages = ["ls", "grep", "git", "tar", "find", "bash", "python3", "gcc", "ssh", "curl", "sed", "awk"]
    if shutil.which("man"):
        for page in pages:
            data = run(["man", "-P", "cat", page], ok_codes=[0])
            if data:
                corpus.add("man-rendered", "text", f"man -P cat {page}", cap_text(data), cap=SMALL_CAP)
    else:
        corpus.skip("man-rendered", "man missing")
    troff = list(index.files(["gz"], under=["/usr/share/man/man1", "/usr/share/man/man5", "/usr/share/man/man8", "/usr/share/man/man3"], per_dir=100000))
    added = 0
    for path in troff[:: max(1, len(troff) // (SMALL_CAP + 2))]:
        try:
            with gzip.open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if data and len(data) <= MAX_FILE_BYTES and not data.startswith(b".so ") and corpus.add("man-troff", "text", f"gzip -dc {path}", data, cap=SMALL_CAP):
            added += 1
    if not added:
        corpus.skip("man-troff", "no man pages")

    helps = [["ls", "--help"], ["git", "--help"], ["cargo", "--help"], ["tar", "--help"], ["grep", "--help"], ["gcc", "--help"], ["rustc", "--help"], ["curl", "--help", "all"], ["find", "--help"], ["cargo", "build", "--help"]]
    for cmd in helps:
        add_command(corpus, "help", "text", cmd)

    # Compiler diagnostics with and without colour.
    work = os.path.join(corpus.out, "c-src")
    os.makedirs(work, exist_ok=True)
    bad_c = os.path.join(work, "bad.c")
    with open(bad_c, "w") as f:
        f.write('#include <stdio.h>\n\nstruct point { int x; int y; };\n\nint area(struct point *p) {\n    return p->x * p->z;\n}\n\nint main(void) {\n    int n = "text";\n    printf("%d\\n", area(n));\n    undeclared(3);\n    return 0\n}\n')
    bad_cpp = os.path.join(work, "bad.cpp")
    with open(bad_cpp, "w") as f:
        f.write('#include <vector>\n#include <string>\n#include <map>\n\nint main() {\n    std::map<std::string, std::vector<int>> m;\n    m[1] = "x";\n    std::vector<int> v = m;\n    return v.size();\n}\n')
    for compiler, src in (("gcc", bad_c), ("g++", bad_cpp), ("cc", bad_c)):
        if shutil.which(compiler) is None:
            corpus.skip("ansi-compiler", f"{compiler} missing")
            continue
        add_command(corpus, "ansi-compiler", "text", [compiler, "-fdiagnostics-color=always", "-Wall", "-c", src, "-o", os.devnull], stderr=True, source=f"{compiler} -fdiagnostics-color=always (bad source)")
        add_command(corpus, "compiler-plain", "text", [compiler, "-fdiagnostics-color=never", "-Wall", "-c", src, "-o", os.devnull], stderr=True, source=f"{compiler} (bad source)")

    # Coloured listings and searches.
    add_command(corpus, "ansi-tools", "text", ["ls", "--color=always", "-la", "/usr/share"])
    add_command(corpus, "ansi-tools", "text", ["ls", "--color=always", "/usr/bin"])
    add_command(corpus, "ansi-tools", "text", ["grep", "--color=always", "-rn", "fn ", "src/synopsis"], cwd=REPO)
    add_command(corpus, "ansi-tools", "text", ["grep", "--color=always", "-n", "def ", "/usr/lib/python3.11/json/decoder.py"])
    add_command(corpus, "ansi-tools", "text", ["git", "-c", "color.ui=always", "log", "--stat", "-n", "5"], cwd=REPO)
    add_command(corpus, "ansi-tools", "text", ["git", "-c", "color.ui=always", "show", "--stat"], cwd=REPO)
    add_command(corpus, "ansi-tools", "text", ["npm", "ls", "-g", "--color=always"])

    # git logs and diffs.
    if shutil.which("git"):
        for cmd in (["git", "log"], ["git", "log", "--stat"], ["git", "log", "-p"], ["git", "show", "--stat"], ["git", "log", "--oneline", "--graph", "--all"], ["git", "status"], ["git", "blame", "src/synopsis/mod.rs"], ["git", "format-patch", "-1", "--stdout"]):
            add_command(corpus, "git", "text", cmd, cwd=REPO, ok_codes=[0], source=" ".join(cmd) + " (toolstub)")
        diff = run(["git", "diff"], cwd=REPO, ok_codes=[0])
        if diff and diff.strip():
            corpus.add("git", "text", "git diff (toolstub working tree)", cap_text(diff))
        pyenv = HOME + "/.pyenv"
        if os.path.isdir(os.path.join(pyenv, ".git")):
            for cmd in (["git", "log", "-n", "20"], ["git", "show", "--stat"], ["git", "log", "-p", "-n", "1"]):
                add_command(corpus, "git", "text", cmd, cwd=pyenv, ok_codes=[0], source=" ".join(cmd) + " (pyenv)")
        # Diffs between two versions of the same file shipped twice on this machine.
        pairs = version_pairs(index)
        for a, b in pairs[:8]:
            data = run(["git", "diff", "--no-index", "--", a, b])
            if data and data.strip():
                corpus.add("diff", "text", f"git diff --no-index {a} {b}", cap_text(data))
        for a, b in pairs[8:12]:
            data = run(["diff", "-u", a, b])
            if data and data.strip():
                corpus.add("diff", "text", f"diff -u {a} {b}", cap_text(data))
    else:
        corpus.skip("git", "git missing")

    # Logs.
    logs = sorted(
        os.path.join(d, f)
        for d in ("/var/log", "/var/log/apt", "/var/log/postgresql", "/var/log/installer")
        if os.path.isdir(d)
        for f in os.listdir(d)
        if f.endswith(".log") or f == "syslog"
    )
    added = 0
    for path in logs:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES)
        except OSError:
            continue
        data = cap_text(data, MAX_FILE_BYTES - 1)
        if data.strip() and corpus.add("logs", "text", path, data):
            added += 1
    for cmd in (["dmesg"], ["journalctl", "-n", "200", "--no-pager"]):
        data = run(cmd, ok_codes=[0])
        if data and data.strip() and b"No entries" not in data:
            corpus.add("logs", "text", " ".join(cmd), cap_text(data))
            added += 1
        else:
            corpus.skip("logs", f"`{' '.join(cmd)}` unavailable")
    # Build logs: cargo's human-readable progress on a crate that compiles.
    if not added:
        corpus.skip("logs", "no readable logs")

    # Markdown READMEs and changelogs.
    md = spread([index.files(["md"], under=[HOME + "/.cargo/registry/src"], where=lambda p: os.path.basename(p).lower().startswith(("readme", "changelog", "contributing")))], CATEGORY_CAP * 2)
    add_files(corpus, "markdown", "text", md)

    # Plain text documents: licences, notes, package copyright files.
    docs = spread(
        [
            # CMakeLists.txt is CMake code, not a text document.
            index.files(["txt"], under=["/usr/share", "/usr/lib/python3"], where=lambda p: not p.endswith("CMakeLists.txt")),
            index.files(["txt"], under=[HOME + "/.cargo/registry/src"], where=lambda p: not p.endswith("CMakeLists.txt")),
            [os.path.join("/usr/share/doc", d, "copyright") for d in (sorted(os.listdir("/usr/share/doc")) if os.path.isdir("/usr/share/doc") else [])][::7],
        ],
        CATEGORY_CAP * 3,
    )
    add_files(corpus, "plain-text", "text", docs, cap=SMALL_CAP + 5)

    # System listings.
    for cmd in (["ps", "aux"], ["ps", "-ef"], ["df", "-h"], ["df", "-i"], ["free", "-m"], ["ls", "-la", "/etc"], ["uname", "-a"], ["mount"], ["id"], ["lscpu"], ["ls", "-lR", "/usr/share/doc/git"]):
        add_command(corpus, "sysinfo", "text", cmd, ok_codes=[0])
    data = run(["ls", "-la", "/usr/bin"])
    if data:
        corpus.add("sysinfo", "text", "ls -la /usr/bin | head -200", b"\n".join(data.split(b"\n")[:200]) + b"\n")
    for path in ("/proc/cpuinfo", "/proc/meminfo", "/etc/os-release", "/etc/passwd", "/etc/services"):
        try:
            with open(path, "rb") as f:
                data = cap_text(f.read(MAX_FILE_BYTES))
        except OSError:
            continue
        if data.strip():
            corpus.add("sysinfo", "text", f"cat {path}", data)

    # Other configuration formats: TOML and INI are not a kind of their own.
    tomls = spread([index.files(["toml"], under=[HOME + "/.cargo/registry/src"], where=lambda p: p.endswith("/Cargo.toml.orig") or p.endswith("/Cargo.toml"))], 10)
    add_files(corpus, "config-text", "text", tomls, cap=10)
    inis = [p for p in ("/etc/adduser.conf", "/etc/sysctl.conf", "/etc/gai.conf", "/etc/ld.so.conf", "/etc/nsswitch.conf", "/etc/logrotate.conf", "/etc/ssh/ssh_config", "/etc/gitconfig", HOME + "/.gitconfig", "/etc/mke2fs.conf") if os.path.isfile(p)]
    add_files(corpus, "config-text", "text", inis, cap=18)


def version_pairs(index):
    """Files that exist in two versions of one crate in the cargo registry."""
    reg = HOME + "/.cargo/registry/src"
    if not os.path.isdir(reg):
        return []
    pairs = []
    for registry in sorted(os.listdir(reg)):
        base = os.path.join(reg, registry)
        crates = sorted(os.listdir(base))
        by_name = {}
        for c in crates:
            name, _, version = c.rpartition("-")
            if name:
                by_name.setdefault(name, []).append(c)
        for name, versions in sorted(by_name.items()):
            if len(versions) < 2:
                continue
            a, b = versions[0], versions[1]
            for rel in ("src/lib.rs", "Cargo.toml", "README.md"):
                pa, pb = os.path.join(base, a, rel), os.path.join(base, b, rel)
                if os.path.isfile(pa) and os.path.isfile(pb) and os.path.getsize(pa) < MAX_FILE_BYTES:
                    pairs.append((pa, pb))
                    break
    return pairs


# ---------------------------------------------------------------- agents' wrappers

def claude_read(data, first=1, limit=2000, arrow=False):
    """A file as Claude Code's Read tool returns it: each line (split on
    `\\n`, a trailing `\\r` dropped) as `N<TAB>line`, unpadded (2.1.x, as
    captured from Claude Code 2.1.328), or right-aligned in 6 columns with
    an arrow (older versions); at most `limit` lines from line `first`."""
    lines = data.decode("utf-8", "replace").split("\n")[first - 1 : first - 1 + limit]
    out = []
    for i, line in enumerate(lines):
        if line.endswith("\r"):
            line = line[:-1]
        number = f"{first + i:>6}\u2192" if arrow else f"{first + i}\t"
        out.append(number + line)
    return "\n".join(out).encode("utf-8")


def line_count(data):
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def codex_exec(output, code, seconds, chunk):
    """Codex's exec_command result around a command's output (openai/codex
    ExecCommandToolOutput::response_text); the token count as Codex
    approximates it (bytes / 4, rounded up)."""
    head = f"Chunk ID: {chunk}\nWall time: {seconds:.4f} seconds\nProcess exited with code {code}\nOriginal token count: {(len(output) + 3) // 4}\nOutput:\n"
    return head.encode() + output


def codex_cut(output, keep=10_000):
    """Codex's cut of a long output to its head and tail, with its header."""
    text = output.decode("utf-8", "replace")
    half = keep // 2
    removed = (len(output) - keep + 3) // 4
    cut = f"{text[:half]}\u2026{removed} tokens truncated\u2026{text[-half:]}"
    return f"Total output lines: {len(text.splitlines())}\n\n{cut}".encode("utf-8")


def codex_structured(output, code, seconds):
    """Codex's structured shell result: compact JSON as serde_json writes it."""
    payload = {"output": output.decode("utf-8", "replace"), "metadata": {"exit_code": code, "duration_seconds": round(seconds, 1)}}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def is_regular_csv(data):
    """A comma-separated table by Python's csv module: at least two rows of
    at least two columns, every row as wide as the header."""
    import csv
    import io
    try:
        rows = [r for r in csv.reader(io.StringIO(data.decode("utf-8"))) if r]
    except (UnicodeDecodeError, csv.Error):
        return False
    return len(rows) >= 2 and len(rows[0]) >= 2 and all(len(r) == len(rows[0]) for r in rows)


def timed(cmd, cwd=None, stdin=None):
    """(stdout and stderr, exit code, seconds) of a real command, or None."""
    if shutil.which(cmd[0]) is None:
        return None
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=clean_env(), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    return cap_text(proc.stdout), proc.returncode, time.monotonic() - start


def wrapper_samples(corpus, index):
    """Real files and real command outputs inside the wrappers of Claude Code
    and Codex, labelled with the kind of the content inside."""
    cap = SMALL_CAP + 2
    site = [p for p in sys.path if p.endswith("site-packages")]
    # Whole files (at most 2,000 lines: Read's default limit keeps them whole).
    sources = [
        ("listed-json", "json", spread([index.files(["json"], under=site), index.files(["json"], under=["/usr/share", "/usr/lib/node_modules"])], 60), is_strict_json),
        ("listed-code", "code", spread([index.files(["py"], under=["/usr/lib/python3.11", "/usr/lib/python3"], per_dir=1), index.files(["rs"], under=[HOME + "/.cargo/registry/src"]), index.files(["c", "h"], under=["/usr/include", HOME + "/.cargo/registry/src"]), index.files(["js"], under=["/usr/lib/node_modules"])], 60), None),
        ("listed-csv", "csv", spread([index.files(["csv"], under=["/usr/share", "/usr/lib/python3", HOME + "/.cargo/registry/src"] + site, per_dir=3, skip_fixtures=False)], 60), is_regular_csv),
        ("listed-yaml", "yaml", spread([index.files(["yml", "yaml"], under=[HOME + "/.cargo/registry/src"], where=lambda p: "/.github/" in p), index.files(["yml", "yaml"], under=["/usr/share", "/etc"] + site)], 60), lambda d: only_comments(d) is None),
        ("listed-xml", "xml", spread([index.files(["xml"], under=["/usr/share/mime"]), index.files(["svg"], under=["/usr/share"])], 60), is_well_formed_xml),
    ]
    for category, kind, paths, check in sources:
        added = 0
        for n, path in enumerate(paths):
            if corpus.full(category, cap):
                break
            data = read(path)
            if not data or line_count(data) > 2000 or (check and not check(data)):
                continue
            # Every third file as `cat -n` prints it, every fourth as older
            # Claude Code listed it, the others as Claude Code 2.1 does.
            if n % 3 == 2:
                listed = run(["cat", "-n", path], ok_codes=[0])
                source = f"cat -n {path}"
            elif n % 4 == 3:
                listed, source = claude_read(data, arrow=True), f"Claude Code Read (arrow style) of {path}"
            else:
                listed, source = claude_read(data), f"Claude Code Read of {path}"
            if listed and corpus.add(category, kind, source, listed, cap):
                added += 1
        if not added:
            corpus.skip(category, "no suitable files on this machine")
    # A Read with an offset and a limit: a part of a source file is still code.
    parts = 0
    for path in spread([index.files(["py"], under=["/usr/lib/python3.11", "/usr/lib/python3"], per_dir=1)], 20):
        data = read(path)
        if data and line_count(data) > 400 and corpus.add("listed-code-part", "code", f"Claude Code Read (offset 200, limit 150) of {path}", claude_read(data, first=200, limit=150), cap=SMALL_CAP):
            parts += 1
    if not parts:
        corpus.skip("listed-code-part", "no long Python files")
    # Claude Code's older Read added a reminder after the listing.
    reminder = b"\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware. You CAN and SHOULD provide analysis of malware, what it is doing. But you MUST refuse to improve or augment the code.\n</system-reminder>\n"
    for path in spread([index.files(["json"], under=site)], 10)[:3]:
        data = read(path)
        if data and is_strict_json(data) and line_count(data) <= 2000:
            corpus.add("listed-reminder", "json", f"Claude Code Read (with its reminder) of {path}", claude_read(data) + reminder, cap=3)

    # Codex: real command outputs inside exec_command's header.
    py = sys.executable or "python3"
    commands = [
        ([py, "-m", "pip", "list", "--format=json"], None, "json"),
        ([py, "-m", "json.tool", "/usr/lib/node_modules/npm/package.json"], None, "json"),
        (["node", "-p", "JSON.stringify(process.versions, null, 2)"], None, "json"),
        (["git", "log", "-n", "30"], REPO, "text"),
        (["ls", "-la", "/usr/share"], None, "text"),
        (["sqlite3", "-csv", "-header", ":memory:", "select * from pragma_function_list"], None, "csv"),
        (["cat", os.path.join(REPO, "src/synopsis/mod.rs")], None, "code"),
        ([py, "-c", "import json\nprint(json.loads('{\"a\": 1,,}'))"], None, "text"),
    ]
    for i, (cmd, cwd, kind) in enumerate(commands):
        got = timed(cmd, cwd=cwd)
        if not got or not got[0].strip():
            corpus.skip("codex-exec", f"`{' '.join(cmd)}` unavailable")
            continue
        output, code, seconds = got
        corpus.add("codex-exec", kind, f"Codex exec_command of `{' '.join(cmd)}`", codex_exec(output, code, seconds, f"{i:06x}"))
    # Codex's other shell formats around real outputs.
    got = timed([py, "-m", "pip", "list", "--format=json"])
    if got:
        output, code, seconds = got
        corpus.add("codex-shell", "json", "Codex structured shell output of `pip list --format=json`", codex_structured(output, code, seconds))
        corpus.add("codex-shell", "json", "Codex freeform shell output of `pip list --format=json`", f"Exit code: {code}\nWall time: {round(seconds, 1)} seconds\nOutput:\n".encode() + output)
    got = timed(["git", "log", "--stat", "-n", "40"], cwd=REPO)
    if got:
        output, code, seconds = got
        corpus.add("codex-shell", "text", "Codex structured shell output of `git log --stat`", codex_structured(output, code, seconds))
    # Codex cut the middle of long outputs: a cut JSON is no longer JSON.
    big = run([py, "-m", "pip", "inspect"], ok_codes=[0])
    if big and len(big) > 20_000:
        # Whether the head and tail still parse depends on where the cut fell.
        cut = codex_cut(big)
        kind = "json" if is_strict_json(cut.split(b"\n\n", 1)[1]) else "text"
        corpus.add("codex-cut", kind, "Codex exec_command of `pip inspect`, cut by Codex", codex_exec(cut, 0, 0.4, "0000ff"))
    got = timed(["git", "log", "-p", "-n", "5"], cwd=REPO)
    if got and len(got[0]) > 20_000:
        corpus.add("codex-cut", "text", "Codex exec_command of `git log -p`, cut by Codex", codex_exec(codex_cut(got[0]), got[1], got[2], "0000fe"))

    # Claude Code's Bash result of failing commands: `Exit code N`, stderr, stdout.
    for cmd in ([py, "-c", "import json\njson.loads('[1, 2,')"], ["ls", "-la", "/usr/share/doc", "/nonexistent-dir"], ["git", "log", "--no-such-option"]):
        proc = timed(cmd, cwd=REPO)
        if proc and proc[1] != 0:
            corpus.add("claude-bash", "text", f"Claude Code Bash result of `{' '.join(cmd)}` (failed)", f"Exit code {proc[1]}\n".encode() + proc[0])
    # Claude Code's Grep and Glob results: lists of matches and paths, text.
    grep = run(["grep", "-rn", "-C", "1", "def ", "/usr/lib/python3.11/json"])
    if grep:
        corpus.add("claude-search", "text", "Claude Code Grep (content, -C 1) of def in json/", cap_text(grep))
    files = run(["grep", "-rl", "import", "/usr/lib/python3.11/email"])
    if files:
        names = files.decode().split()
        corpus.add("claude-search", "text", "Claude Code Grep (files_with_matches) of import in email/", f"Found {len(names)} files\n" + "\n".join(names))
    found = run(["find", "/usr/lib/python3.11/json", "/usr/lib/python3.11/email", "-name", "*.py"])
    if found:
        corpus.add("claude-search", "text", "Claude Code Glob of **/*.py in json/ and email/", found.strip())


# ------------------------------------------------- classes that were misjudged

def python_statements(data):
    """The statements of a Python module other than its docstring, by Python's
    own parser; None when it does not parse."""
    import ast
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return body


def has_import_list(data):
    """A module with `import a, b` (several modules in one statement)."""
    import ast
    body = python_statements(data) or []
    return any(isinstance(node, ast.Import) and len(node.names) > 1 for node in body)


def one_comma_lines(data, limit=12):
    """The first lines of a real document that hold exactly one comma."""
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.count(",") == 1]
    return ("\n".join(lines[:limit]) + "\n").encode() if len(lines) >= 3 else None


def class_samples(corpus, index):
    """Real outputs of the classes once misjudged: short Python
    modules (`import a, b`, module-level assignments and calls), shell
    functions without an interpreter line, lines of prose that each hold
    one comma, rendered documentation (pydoc) and READMEs quoting a little
    code, and traces (strace, LD_DEBUG) with pid prefixes and tabs."""
    py_roots = sorted(d for d in ("/usr/lib/python3.11", "/usr/lib/python3/dist-packages", os.path.join(sys.base_prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}")) if os.path.isdir(d))
    small = lambda p: os.path.getsize(p) <= 3000
    short = spread([index.files(["py"], under=[r], per_dir=1, where=small) for r in py_roots], 200)
    add_files(corpus, "code-python-short", "code", short, cap=CODE_LANGUAGE_CAP, check=lambda d: len(python_statements(d) or []) >= 2)
    lists = spread([index.files(["py"], under=[r], per_dir=3, where=lambda p: os.path.getsize(p) <= 4000) for r in py_roots], 400)
    add_files(corpus, "code-python-import-list", "code", lists, cap=SMALL_CAP, check=has_import_list)

    # Shell function libraries: no interpreter line, functions only.
    completions = "/usr/share/bash-completion/completions"
    libs = [p for p in ("/lib/lsb/init-functions", "/usr/lib/git-core/git-sh-setup", "/usr/share/debconf/confmodule") if os.path.isfile(p)]
    if os.path.isdir(completions):
        names = sorted(os.listdir(completions))
        libs += [os.path.join(completions, n) for n in names[:: max(1, len(names) // 12)]]
    profile = "/etc/profile.d"
    if os.path.isdir(profile):
        libs += [os.path.join(profile, n) for n in sorted(os.listdir(profile)) if n.endswith(".sh")]
    add_files(corpus, "code-shell-functions", "code", [p for p in libs if not os.path.islink(p)], cap=CODE_LANGUAGE_CAP, check=lambda d: b"() {" in d or b"()\n{" in d or b"() (" in d)

    # Lines of prose that each hold one comma.
    ack = [os.path.join(r, f) for r, _, fs in os.walk("/usr/share/doc") for f in fs if f.upper().startswith(("ACKNOWLEDG", "THANKS", "AUTHORS", "CREDITS"))] if os.path.isdir("/usr/share/doc") else []
    for path in sorted(ack):
        data = read(path)
        lines = [l for l in (data or b"").decode("utf-8", "replace").splitlines() if l.strip()]
        if len(lines) >= 3 and sum(1 for l in lines if l.count(",") == 1) * 5 >= len(lines) * 4:
            corpus.add("prose-commas", "text", path, data, cap=SMALL_CAP)
    zen = run([sys.executable, "-m", "this"], ok_codes=[0])
    if zen and one_comma_lines(zen):
        corpus.add("prose-commas", "text", "python3 -m this | grep ,", one_comma_lines(zen), cap=SMALL_CAP)
    page = run(["man", "-P", "cat", "ls"], env=clean_env(MANWIDTH="80"), ok_codes=[0])
    if page and one_comma_lines(page):
        corpus.add("prose-commas", "text", "man ls | grep (lines with one comma)", one_comma_lines(page), cap=SMALL_CAP)
    for licence in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"):
        data = read(licence)
        if data and one_comma_lines(data):
            corpus.add("prose-commas", "text", f"grep (lines with one comma) {licence}", one_comma_lines(data), cap=SMALL_CAP)
    if corpus.counts.get("prose-commas", 0) == 0:
        corpus.skip("prose-commas", "no documents on this machine")

    # Rendered documentation: pydoc (man pages are sampled with the text).
    for module in ("os", "time", "pprint", "gettext", "json", "re", "subprocess", "itertools", "locale", "operator"):
        data = run([sys.executable, "-m", "pydoc", module], env=clean_env(PAGER="cat"), ok_codes=[0])
        if data and len(data) >= MIN_FILE_BYTES:
            corpus.add("pydoc", "text", f"python3 -m pydoc {module}", cap_text(data), cap=CODE_LANGUAGE_CAP)

    # READMEs and reStructuredText documents that quote some code.
    quotes_code = lambda d: b"::\n\n    " in d or b"\ndef " in d or b".. code-block::" in d or b"\nimport " in d
    docs = spread([index.files(["rst", "txt"], under=[r], per_dir=1, where=lambda p: p.endswith(".rst") or os.path.basename(p).upper().startswith("README")) for r in py_roots + ["/usr/lib/google-cloud-sdk", "/usr/share/doc"]], 300)
    add_files(corpus, "readme-code", "text", docs, cap=CODE_LANGUAGE_CAP, check=quotes_code)

    # Traces: strace (pid prefixes with -f) and the dynamic loader's LD_DEBUG.
    if shutil.which("strace"):
        for cmd in (["strace", "-f", "sh", "-c", "ls / | wc -l"], ["strace", "-f", "-tt", "sh", "-c", "echo hi; ls /usr >/dev/null"], ["strace", "-c", "ls", "/usr"]):
            data = run(cmd, stderr=True)
            if data and data.strip():
                corpus.add("traces", "text", " ".join(cmd) + " (stderr)", cap_text(data))
    else:
        corpus.skip("traces", "strace missing")
    for what in ("libs", "symbols", "bindings", "files", "versions"):
        data = run(["sh", "-c", "ls / >/dev/null"], env=clean_env(LD_DEBUG=what), stderr=True)
        if data and data.strip():
            corpus.add("traces", "text", f"LD_DEBUG={what} sh -c 'ls /' (stderr)", cap_text(data))


def binary_samples(corpus, index):
    paths = ["/usr/bin/ls", "/usr/bin/true", "/usr/bin/cat"]
    paths += list(index.files(["gz"], under=["/usr/share/doc"], per_dir=1))[:3]
    paths += list(index.files(["png"], under=["/usr/share"], per_dir=1))[:3]
    paths += list(index.files(["mo"], under=["/usr/share/locale"], per_dir=1))[:2]
    paths += list(index.files(["pyc"], under=["/usr/lib/python3"], per_dir=1, skip_fixtures=False))[:1]
    paths += list(index.files(["so"], under=["/usr/lib/python3"], per_dir=1))[:1]
    paths += list(index.files(["jpg", "jpeg", "ttf", "woff2", "zip", "xz"], under=["/usr/share", "/usr/lib"], per_dir=1))[:3]
    added = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read(64_000)  # what `head -c 64000` prints
        except OSError:
            continue
        if data and corpus.add("binary", "unknown", f"head -c 64000 {path}", data, cap=15):
            added += 1
    if not added:
        corpus.skip("binary", "no binary files")
    corpus.add("empty", "unknown", "true (no output)", b"")
    data = run(["grep", "-r", "zzz-no-such-string-zzz", os.path.join(REPO, "src")])
    if data is not None:
        corpus.add("empty", "unknown", "grep with no match", data)
    data = run(["find", os.path.join(REPO, "src"), "-name", "*.nothing"])
    if data is not None:
        corpus.add("empty", "unknown", "find with no match", data)


# Languages whose declarations universal-ctags lists, by category: the
# accuracy test checks the code kind's symbols against them. (Not Java:
# ctags 5.9 misses the methods of anonymous classes.)
CTAGS_LANGUAGES = {
    "code-rust": "Rust",
    "code-c": "C",
    "code-go": "Go",
    "code-shell": "Sh",
    "code-shell-functions": "Sh",
    "code-git-show": "Rust",
}


def add_declarations(corpus):
    """Adds to each sample of CTAGS_LANGUAGES what universal-ctags (an
    independent parser) finds declared in it: "declared", every tag name, and
    "functions", the shell functions in line order (tags whose line has the
    function form: ctags 5.9 also reports `X=(` and words in here-documents
    as functions). Without ctags nothing is added and the check is skipped."""
    if shutil.which("ctags") is None:
        corpus.skip("declarations", "universal-ctags missing")
        return
    for sample in corpus.samples:
        language = CTAGS_LANGUAGES.get(sample["category"])
        if language is None:
            continue
        out = run(["ctags", "--output-format=json", "--fields=+nK", "--kinds-C=+px", f"--language-force={language}", "-f", "-", os.path.join(corpus.out, sample["file"])], ok_codes=[0])
        if out is None:
            continue
        tags = []
        for line in out.decode("utf-8", "replace").splitlines():
            try:
                tag = json.loads(line)
            except ValueError:
                continue
            if tag.get("_type") == "tag" and "name" in tag:
                tags.append(tag)
        sample["declared"] = sorted({t["name"] for t in tags})
        if language == "Sh":
            shell = []
            for t in sorted(tags, key=lambda t: t.get("line", 0)):
                pattern = t.get("pattern", "")
                name = t["name"]
                if t.get("kind") == "function" and "=" not in name and (f"{name}()" in pattern or f"{name} ()" in pattern or f"function {name}" in pattern):
                    shell.append(name)
            sample["functions"] = shell


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the samples and manifest.json into")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    started = time.monotonic()
    corpus = Corpus(out)

    site = [p for p in sys.path if p.endswith("site-packages")]
    roots = ["/usr/share", "/usr/include", "/usr/lib", "/etc", HOME + "/.cargo/registry/src", HOME + "/.pyenv/.github", HOME + "/.pyenv/plugins", HOME + "/.rustup/toolchains"] + site
    seen = []
    for r in roots:
        if r not in seen and os.path.isdir(r):
            seen.append(r)
    suffixes = {"csv", "tsv", "yml", "yaml", "xml", "svg", "json", "py", "rs", "c", "h", "hpp", "cpp", "cc", "cxx", "hh", "js", "mjs", "cjs", "ts", "tsx", "pm", "pl", "go", "rb", "php", "cs", "sql", "tcl", "lua", "md", "rst", "txt", "toml", "gz", "png", "mo", "pyc", "so", "jpg", "jpeg", "ttf", "woff2", "zip", "xz"}
    index = FileIndex(seen, suffixes)
    log(f"indexed files in {time.monotonic() - started:.1f}s")

    for step in (cargo_samples, python_samples, node_samples, table_samples, yaml_samples, xml_samples, code_samples, text_samples, class_samples, wrapper_samples, binary_samples):
        t0 = time.monotonic()
        try:
            if step is cargo_samples:
                step(corpus, out)
            else:
                step(corpus, index)
        except Exception as err:  # a broken step must not lose the others
            corpus.skip(step.__name__, f"failed: {err!r}")
        log(f"{step.__name__}: {time.monotonic() - t0:.1f}s")

    add_declarations(corpus)
    corpus.write_manifest()
    log(f"{len(corpus.samples)} samples, {len(corpus.skipped)} skipped, {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
