"""End-to-end: the dashboard (`GET /toolstub/`) in a real headless browser.

Real traffic first: the official `openai` SDK sends conversations through
the real `toolstub serve` binary to the mock upstream (mock_upstream.py):
two sessions, several externalized outputs, a repeated turn and a recall
round. Then Debian's Chromium, driven over WebDriver (selenium and
Debian's chromedriver), opens the dashboard, signs in with the API key and
is checked against what the proxy itself reports: the totals against
`/metrics`, the chart's points against the stats endpoint's series, an
opened output against the original the SDK sent and the stub the upstream
received; a wrong key shows none of it; no secret reaches a URL.

WebDriver rather than the DevTools protocol: it is what a person does
(typing into the form, clicking rows), with waits, through one pinned
client, and Debian ships the driver matching its Chromium.

`DASHBOARD_SCREENSHOT=docs/dashboard.png` saves the screenshot there (the
README's); otherwise it goes to the test's temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

import mock_upstream as m
from conftest import API_KEY, REPO, start_proxy, stop_proxy

WRONG_KEY = "sk-not-the-same-tenant"
WINDOW = 4000  # the page's window of an original, in code points
WAIT = 20.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- the traffic -------------------------------------------------------------


def stations_json() -> str:
    rows = [{"id": i, "name": f"station {i}", "temp_c": round(-5 + (i * 7 % 400) / 10, 1),
             "city": ["Zürich", "東京", "Oslo"][i % 3]} for i in range(900)]
    return json.dumps({"count": len(rows), "stations": rows}, ensure_ascii=False, indent=1)


def build_log() -> str:
    return "".join(f"2026-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z INFO step {i}: compiled crate_{i % 37} "
                   f"in {i % 900} ms\n" for i in range(700))


def listing_csv() -> str:
    return "path,bytes,owner\n" + "".join(f"src/module_{i}/file_{i}.rs,{i * 37 % 9000},dev{i % 5}\n"
                                          for i in range(1400))


OUTPUTS = {
    "call_stations": ("get_stations", stations_json()),
    "call_build": ("run_build", build_log()),
    "call_listing": ("list_files", listing_csv()),
}


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}


def conversation(opening: str, calls: list[str]) -> list[dict]:
    return [
        {"role": "user", "content": opening},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": c, "type": "function", "function": {"name": OUTPUTS[c][0], "arguments": "{}"}} for c in calls]},
        *({"role": "tool", "tool_call_id": c, "content": OUTPUTS[c][1]} for c in calls),
    ]


def ref_of(call_id: str) -> str:
    return f"tr_{call_id}_{hashlib.sha256(OUTPUTS[call_id][1].encode()).hexdigest()[:16]}"


def stubs_upstream(mock) -> dict[str, str]:
    """Every stub the upstream received, by ref."""
    found = {}
    for r in mock.requests():
        for message in (r.json or {}).get("messages", []):
            content = message.get("content")
            if isinstance(content, str) and content.startswith("[toolstub: tool output externalized]"):
                ref = next(line[5:] for line in content.splitlines() if line.startswith("ref: "))
                found[ref] = content
    return found


def send_traffic(url: str, mock) -> None:
    tools = [tool(name) for name, _ in OUTPUTS.values()]
    with openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=30.0,
                       http_client=openai.DefaultHttpxClient(trust_env=False)) as client:
        # Session A, turn 1: two outputs externalized.
        a = conversation("Why did the nightly build slow down?", ["call_build", "call_stations"])
        client.chat.completions.create(model=m.MODEL, messages=a, tools=tools)
        time.sleep(1.1)  # the traffic spans several one-second buckets
        # Session B: another conversation, one output.
        b = conversation("Which files are largest?", ["call_listing"])
        client.chat.completions.create(model=m.MODEL, messages=b, tools=tools)
        time.sleep(1.1)
        # Session A, turn 2: the same outputs again (repeated), one more turn.
        a2 = a + [{"role": "assistant", "content": m.COMPLETION_TEXT}, {"role": "user", "content": "And now?"}]
        client.chat.completions.create(model=m.MODEL, messages=a2, tools=tools)
        time.sleep(1.1)
        # Session B, turn 2, streamed: the model reads a stub's original back
        # (a recall round the proxy answers itself).
        mock.recall_mode = True
        b2 = b + [{"role": "assistant", "content": m.COMPLETION_TEXT}, {"role": "user", "content": "Show me."}]
        chunks = list(client.chat.completions.create(model=m.MODEL, messages=b2, tools=tools, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.startswith("Let me check. It begins with "), text
        mock.recall_mode = False


# --- what the proxy reports ----------------------------------------------------


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def metric_sum(text: str, name: str) -> int:
    """The sum of every sample of a Prometheus counter family."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, _, value = line.rpartition(" ")
        if series == name or series.startswith(name + "{"):
            total += float(value)
    return int(total)


def stats(url: str, key: str, **params) -> dict | None:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    status, body = http_get(f"{url}/toolstub/v1/stats?{query}", {"Authorization": f"Bearer {key}"})
    if status == 404:
        return None
    assert status == 200, body[:300]
    return json.loads(body)


# --- the browser -------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_bin = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.access(chromium, os.X_OK) and os.access(driver_bin, os.X_OK)):
        pytest.fail("Debian's chromium and chromium-driver are needed: scripts/e2e installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900", "--hide-scrollbars",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    service = Service(executable_path=driver_bin, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_window_size(1280, 900)
    yield driver
    driver.quit()


def wait(driver, condition, what: str):
    try:
        # The page re-renders as answers arrive: an element found a moment
        # ago may be gone, so try again.
        return WebDriverWait(driver, WAIT, ignored_exceptions=[NoSuchElementException, StaleElementReferenceException]
                             ).until(lambda d: condition(d))
    except TimeoutException:
        pytest.fail(f"the dashboard did not show {what} within {WAIT}s; page text:\n{driver.find_element(By.TAG_NAME, 'body').text[:2000]}")


def text_of(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).get_property("textContent")


def sign_in(driver, key: str) -> None:
    wait(driver, lambda d: d.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form")
    field = driver.find_element(By.ID, "api-key")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "sign-in-button").click()
    wait(driver, lambda d: d.find_element(By.ID, "board").is_displayed(), "the board")
    # Loaded: the outputs table or its empty note is there.
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#outputs table, #outputs .empty"), "the outputs")


def sign_out(driver) -> None:
    driver.find_element(By.ID, "sign-out").click()
    wait(driver, lambda d: d.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form again")


@dataclass
class Traffic:
    url: str
    upstream_stubs: dict[str, str]


@pytest.fixture(scope="module")
def traffic(mock, tmp_path_factory) -> Traffic:
    """One proxy of its own (its counters are this traffic's alone), after
    the traffic; the stubs the upstream received, by ref."""
    home = tmp_path_factory.mktemp("toolstub-dashboard")
    # A price table, so the page shows the estimate and how it was made.
    config = home / "toolstub.toml"
    config.write_text('[[pricing]]\nmatch = "*"\ninput = 3.0\ncache_read = 0.3\ncache_write = 3.75\noutput = 15.0\n')
    proxy = start_proxy(mock.url, home, extra_args=["--config", str(config)])
    mock.reset()
    send_traffic(proxy.url, mock)
    upstream_stubs = stubs_upstream(mock)
    assert set(upstream_stubs) == {ref_of(c) for c in OUTPUTS}, sorted(upstream_stubs)
    yield Traffic(url=proxy.url, upstream_stubs=upstream_stubs)
    code = stop_proxy(proxy)
    assert code == 0, proxy.log_tail()


def test_outputs_open_beside_their_stubs_for_their_tenant_only(traffic, browser):
    url = traffic.url
    browser.get(url + "/toolstub/")
    sign_in(browser, API_KEY)
    # Nothing secret in the URL, and the credential only in sessionStorage.
    assert browser.current_url == url + "/toolstub/"
    stored = browser.execute_script("return window.sessionStorage.getItem('toolstub.dashboard.credential')")
    assert API_KEY in stored
    assert browser.execute_script("return window.localStorage.length") == 0
    if stats(url, API_KEY) is None:
        # Without the stats endpoint the page says so and shows the rest.
        wait(browser, lambda d: d.find_element(By.ID, "stats-missing").is_displayed(), "its no-data note")
        assert "No data" in text_of(browser, "stats-missing")

    # The latest outputs: all three, newest first.
    rows = browser.find_elements(By.CSS_SELECTOR, "#outputs tbody tr")
    refs = [r.find_element(By.CSS_SELECTOR, "code.ref").text for r in rows]
    assert sorted(refs) == sorted(ref_of(c) for c in OUTPUTS)
    assert refs[0] == ref_of("call_listing")

    # Opening one: the original's first window and the stub the upstream got.
    call = "call_build"
    original = OUTPUTS[call][1]
    rows[refs.index(ref_of(call))].click()
    wait(browser, lambda d: d.find_element(By.ID, "output-view").is_displayed()
         and text_of(d, "output-original"), "the opened output")
    assert text_of(browser, "output-original") == original[:WINDOW]
    assert text_of(browser, "output-stub") == traffic.upstream_stubs[ref_of(call)]
    assert f"characters 0–{WINDOW:,} of {len(original):,}" in text_of(browser, "window-range")
    browser.find_element(By.ID, "window-next").click()
    wait(browser, lambda d: text_of(d, "output-original") == original[WINDOW:2 * WINDOW], "the second window")
    browser.find_element(By.ID, "window-prev").click()
    wait(browser, lambda d: text_of(d, "output-original") == original[:WINDOW], "the first window again")
    assert browser.current_url == url + "/toolstub/"

    # Another key is another tenant: none of these outputs.
    sign_out(browser)
    assert browser.execute_script("return window.sessionStorage.length") == 0
    sign_in(browser, WRONG_KEY)
    assert browser.find_elements(By.CSS_SELECTOR, "#outputs tbody tr") == []
    assert "No externalized outputs yet." in text_of(browser, "outputs")
    page = browser.page_source
    for c in OUTPUTS:
        assert ref_of(c) not in page
    assert original[:200] not in page
    for key in (API_KEY, WRONG_KEY):
        assert key not in browser.current_url


def test_totals_and_chart_are_the_proxys_figures(traffic, browser, tmp_path):
    url = traffic.url
    reported = stats(url, API_KEY, bucket_ms=1000)
    if reported is None:
        pytest.fail("GET /toolstub/v1/stats answered 404: the totals and the chart need it")
    # The ledger is written beside the requests: wait (bounded) until the
    # stats agree with the counters, then compare the page with both.
    deadline = time.monotonic() + 30
    while True:
        metrics = http_get(url + "/metrics")[1].decode()
        tokens_saved = metric_sum(metrics, "toolstub_tokens_saved_total")
        if reported["totals"]["tokens_saved"] == tokens_saved > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
        reported = stats(url, API_KEY, bucket_ms=1000)
    chars_saved = metric_sum(metrics, "toolstub_chars_saved_total")
    assert chars_saved > 100_000

    browser.get(url + "/toolstub/")
    sign_in(browser, API_KEY)
    wait(browser, lambda d: d.find_elements(By.ID, "total-tokens-saved"), "the totals")

    def total(name: str) -> int:
        return int(browser.find_element(By.ID, "total-" + name).get_attribute("data-value"))

    assert total("chars-saved") == chars_saved
    assert total("tokens-saved") == tokens_saved > 0
    assert total("outputs") == reported["totals"]["outputs"]
    assert total("outputs-first-seen") == reported["totals"]["outputs_first_seen"] == len(OUTPUTS)
    assert total("recall-calls") == reported["totals"]["recall_calls"] >= 1
    assert total("requests") == reported["totals"]["requests"]
    # The estimate, with the sentence saying how it was priced beside it.
    pricing = reported["pricing"]
    assert pricing is not None and pricing["estimated_saving_usd"] > 0 and pricing["method"]
    assert browser.find_element(By.ID, "pricing").is_displayed()
    assert text_of(browser, "saving-usd") == f"≈ ${pricing['estimated_saving_usd']:.2f} saved"
    assert text_of(browser, "pricing-method") == pricing["method"]
    # Two sessions; every tool.
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 2, "two sessions")
    assert len(reported["sessions"]) == 2
    tools = {r.find_element(By.CSS_SELECTOR, "td span").text
             for r in browser.find_elements(By.CSS_SELECTOR, "#by-tool tbody tr")}
    assert tools == {name for name, _ in OUTPUTS.values()}

    # A session's row narrows the outputs (and the figures) to that session.
    status, body = http_get(f"{url}/toolstub/v1/results", {"Authorization": f"Bearer {API_KEY}"})
    assert status == 200
    session_b = next(r["session_id"] for r in json.loads(body)["results"] if r["ref"] == ref_of("call_listing"))
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
               if r.find_element(By.CSS_SELECTOR, "code").text == session_b)
    row.click()
    wait(browser, lambda d: [c.text for c in d.find_elements(By.CSS_SELECTOR, "#outputs code.ref")]
         == [ref_of("call_listing")], "session B's one output")
    one = stats(url, API_KEY, session=session_b)
    wait(browser, lambda d: d.find_elements(By.ID, "total-tokens-saved")
         and total("tokens-saved") == one["totals"]["tokens_saved"] < tokens_saved, "session B's figures")
    browser.find_element(By.ID, "clear-session").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#outputs code.ref")) == len(OUTPUTS),
         "every output again")
    wait(browser, lambda d: d.find_elements(By.ID, "total-tokens-saved") and total("tokens-saved") == tokens_saved,
         "every session's figures again")

    # The chart: one point per bucket of the series, at its time, its value.
    Select(browser.find_element(By.ID, "bucket")).select_by_value("1000")
    series = reported["series"]
    assert len(series) >= 3, series
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#series-chart rect.point")) == len(series),
         f"{len(series)} chart points")
    points = browser.find_elements(By.CSS_SELECTOR, "#series-chart rect.point")
    assert [int(p.get_attribute("data-at")) for p in points] == [p["at"] for p in series]
    assert [int(p.get_attribute("data-value")) for p in points] == [p["tokens_saved"] for p in series]

    # The screenshot for the README: the top of the page, real data.
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    shot = Path(os.environ.get("DASHBOARD_SCREENSHOT") or tmp_path / "dashboard.png")
    if not shot.is_absolute():
        shot = REPO / shot
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Another tenant's figures are zero.
    sign_out(browser)
    sign_in(browser, WRONG_KEY)
    wait(browser, lambda d: d.find_elements(By.ID, "total-tokens-saved"), "the other tenant's totals")
    assert total("tokens-saved") == 0 and total("chars-saved") == 0
    assert browser.find_elements(By.CSS_SELECTOR, "#series-chart rect.point") == []


def test_a_server_with_an_admin_token_asks_for_it(mock, browser, tmp_path):
    token = "dash-admin-token-e2e"
    proxy = start_proxy(mock.url, tmp_path, {"TOOLSTUB_OPERATOR_API_ADMIN_TOKEN": token})
    try:
        browser.get(proxy.url + "/toolstub/")
        # The page asks for the token (it learnt the server wants one from a
        # request that carries no credential and reads nothing).
        wait(browser, lambda d: d.find_element(By.ID, "admin-token-row").is_displayed(), "the admin token field")
        for given in ("", "not-the-token"):
            browser.find_element(By.ID, "admin-token").send_keys(given)
            browser.find_element(By.ID, "api-key").send_keys(API_KEY)
            browser.find_element(By.ID, "sign-in-button").click()
            wait(browser, lambda d: d.find_element(By.ID, "sign-in-error").is_displayed(), "the sign-in error")
            assert "admin token" in text_of(browser, "sign-in-error")
            assert browser.execute_script("return window.sessionStorage.length") == 0
        browser.find_element(By.ID, "admin-token").send_keys(token)
        sign_in(browser, API_KEY)
        assert "No externalized outputs yet." in text_of(browser, "outputs")
        assert "admin token" in text_of(browser, "who")
        assert token not in browser.current_url and API_KEY not in browser.current_url
        assert browser.current_url == proxy.url + "/toolstub/"
    finally:
        code = stop_proxy(proxy)
        assert code == 0, proxy.log_tail()
