"""Fixtures: the mock upstreams (OpenAI Chat Completions: mock_upstream.py;
Anthropic: mock_anthropic.py; OpenAI Responses: mock_responses.py; Gemini:
mock_gemini.py), the real `toolstub serve` binary in front of each, and
`openai` / `anthropic` SDK clients pointed at the proxy.

The binary is $TOOLSTUB_BIN, or target/debug/toolstub of this repository
($CARGO_TARGET_DIR/debug/toolstub when that is set); `scripts/e2e` builds it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

import mock_anthropic
import mock_gemini
import mock_responses
import mock_upstream

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-test"
ANTHROPIC_KEY = "sk-ant-test-e2e-sdk"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0


def toolstub_bin() -> Path:
    if os.environ.get("TOOLSTUB_BIN"):
        return Path(os.environ["TOOLSTUB_BIN"]).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "toolstub"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# No environment proxy may sit between the test, the proxy and the mock.
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url: str) -> bool:
    try:
        with _NO_PROXY_OPENER.open(url + "/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


@dataclass
class Proxy:
    url: str
    db: Path
    log: Path
    process: subprocess.Popen
    binary: Path

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def start_proxy(upstream: str, workdir: Path, extra_env: dict[str, str] | None = None,
                extra_args: list[str] | None = None) -> Proxy:
    binary = toolstub_bin()
    if not binary.is_file():
        pytest.fail(f"no toolstub binary at {binary}: run scripts/e2e, or set TOOLSTUB_BIN")
    # A hermetic environment: no TOOLSTUB_* overrides, no HTTP proxies.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TOOLSTUB_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env.setdefault("RUST_LOG", "info")
    env.update(extra_env or {})
    db = workdir / "toolstub.db"
    log = workdir / "toolstub.log"
    last_error = ""
    for _attempt in range(3):  # the free port can be taken between probe and bind
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(binary), "serve", "--listen", f"127.0.0.1:{port}", "--upstream", upstream, "--db", str(db),
                 *(extra_args or [])],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=workdir,
            )
        proxy = Proxy(url=url, db=db, log=log, process=process, binary=binary)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            if _healthy(url):
                return proxy
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
            process.wait()
        last_error = proxy.log_tail()
    pytest.fail(f"toolstub serve did not become healthy:\n{last_error}")


def stop_proxy(proxy: Proxy) -> int | None:
    """SIGTERM, then the exit code within STOP_TIMEOUT (None: still running, killed)."""
    if proxy.process.poll() is not None:
        return proxy.process.returncode
    proxy.process.send_signal(signal.SIGTERM)
    try:
        return proxy.process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
        proxy.process.wait()
        return None


@pytest.fixture(scope="session")
def mock() -> mock_upstream.MockUpstream:
    m = mock_upstream.start()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def proxy(mock, tmp_path_factory) -> Proxy:
    p = start_proxy(mock.url, tmp_path_factory.mktemp("toolstub"))
    yield p
    # Graceful shutdown: the SDK's keep-alive connections are still open here.
    code = stop_proxy(p)
    assert code == 0, f"toolstub serve did not exit 0 within {STOP_TIMEOUT}s of SIGTERM (got {code}):\n{p.log_tail()}"


@pytest.fixture(autouse=True)
def _fresh_mock(mock):
    mock.reset()
    yield


class SentRequests:
    """What the SDK put on the wire, captured by an httpx request hook."""

    def __init__(self) -> None:
        self.requests: list = []  # httpx(2).Request, whichever the SDK uses

    def hook(self, request) -> None:
        request.read()
        self.requests.append(request)

    def last(self):
        assert self.requests, "the SDK sent no request"
        return self.requests[-1]


@pytest.fixture
def sent() -> SentRequests:
    return SentRequests()


@pytest.fixture
def client(proxy, sent) -> openai.OpenAI:
    http_client = openai.DefaultHttpxClient(trust_env=False, event_hooks={"request": [sent.hook]})
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20.0, http_client=http_client)
    yield c
    c.close()


@pytest.fixture(scope="session")
def idle_client(proxy) -> openai.OpenAI:
    """A client never closed: its pooled keep-alive connection is still open
    when the session's proxy gets SIGTERM, and shutdown must not wait for it."""
    c = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key=API_KEY,
        max_retries=0,
        timeout=20.0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )
    yield c


# --- the Anthropic Messages route -----------------------------------------


@pytest.fixture(scope="session")
def anthropic_upstream() -> mock_anthropic.MockAnthropic:
    m = mock_anthropic.start()
    yield m
    m.stop()


# History restoration (off by default): the shared Anthropic and Gemini
# proxies put hidden recall exchanges back, so the clients' recall tests
# check them restored byte for byte; opencode's test runs the default.
RESTORING = {"TOOLSTUB_RECALL_RESTORE_HISTORY": "true"}


@pytest.fixture(scope="session")
def aproxy(anthropic_upstream, tmp_path_factory) -> Proxy:
    """toolstub serve in front of the mock Anthropic upstream, restoring."""
    p = start_proxy(anthropic_upstream.url, tmp_path_factory.mktemp("toolstub-anthropic"), RESTORING)
    yield p
    code = stop_proxy(p)
    assert code == 0, f"toolstub serve did not exit 0 within {STOP_TIMEOUT}s of SIGTERM (got {code}):\n{p.log_tail()}"


@pytest.fixture
def amock(anthropic_upstream) -> mock_anthropic.MockAnthropic:
    """The mock Anthropic upstream, emptied and unscripted for each test; a
    script that raised fails the test."""
    anthropic_upstream.reset()
    yield anthropic_upstream
    errors = list(anthropic_upstream.errors)
    anthropic_upstream.reset()
    assert not errors, f"the mock's script failed: {errors}"


@pytest.fixture
def aclient(aproxy, amock, sent) -> anthropic.Anthropic:
    http_client = anthropic.DefaultHttpxClient(trust_env=False, event_hooks={"request": [sent.hook]})
    c = anthropic.Anthropic(base_url=aproxy.url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=30.0,
                            http_client=http_client)
    yield c
    c.close()


# --- the OpenAI Responses route ---------------------------------------------


@pytest.fixture(scope="session")
def responses_upstream() -> mock_responses.MockResponses:
    m = mock_responses.start()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def rproxy(responses_upstream, tmp_path_factory) -> Proxy:
    """toolstub serve in front of the mock Responses upstream."""
    p = start_proxy(responses_upstream.url, tmp_path_factory.mktemp("toolstub-responses"))
    yield p
    code = stop_proxy(p)
    assert code == 0, f"toolstub serve did not exit 0 within {STOP_TIMEOUT}s of SIGTERM (got {code}):\n{p.log_tail()}"


@pytest.fixture
def rmock(responses_upstream) -> mock_responses.MockResponses:
    """The mock Responses upstream, emptied and unscripted for each test; a
    script that raised fails the test."""
    responses_upstream.reset()
    yield responses_upstream
    errors = list(responses_upstream.errors)
    responses_upstream.reset()
    assert not errors, f"the mock's script failed: {errors}"


def responses_client(base_url: str, sent: SentRequests | None = None) -> openai.OpenAI:
    hooks = {"request": [sent.hook]} if sent is not None else {}
    return openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=30.0,
                         http_client=openai.DefaultHttpxClient(trust_env=False, event_hooks=hooks))


@pytest.fixture
def rclient(rproxy, rmock, sent) -> openai.OpenAI:
    """The openai SDK pointed at the proxy in front of the mock Responses upstream."""
    c = responses_client(rproxy.url + "/v1", sent)
    yield c
    c.close()


@pytest.fixture
def rdirect(rmock, sent) -> openai.OpenAI:
    """The openai SDK pointed straight at the mock Responses upstream (no proxy)."""
    c = responses_client(rmock.url + "/v1", sent)
    yield c
    c.close()


# --- the Gemini API route ----------------------------------------------------


@pytest.fixture(scope="session")
def gemini_upstream() -> mock_gemini.MockGemini:
    m = mock_gemini.start()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def gproxy(gemini_upstream, tmp_path_factory) -> Proxy:
    """toolstub serve in front of the mock Gemini upstream, restoring."""
    p = start_proxy(gemini_upstream.url, tmp_path_factory.mktemp("toolstub-gemini"), RESTORING)
    yield p
    code = stop_proxy(p)
    assert code == 0, f"toolstub serve did not exit 0 within {STOP_TIMEOUT}s of SIGTERM (got {code}):\n{p.log_tail()}"


@pytest.fixture
def gmock(gemini_upstream) -> mock_gemini.MockGemini:
    """The mock Gemini upstream, emptied and unscripted for each test; a
    script that raised fails the test."""
    gemini_upstream.reset()
    yield gemini_upstream
    errors = list(gemini_upstream.errors)
    gemini_upstream.reset()
    assert not errors, f"the mock's script failed: {errors}"
