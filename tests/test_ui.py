"""The inspection page at /ui, driven in a real headless Chromium against the real proxy.

The sessions are built once per module through the proxy (echo upstream): one with quarantine
records, pruned history and a filtered tool list, one whose user message is an XSS payload.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import httpx
import openai
import pytest

from tests.test_quarantine import SESSION

CHROMIUM = os.environ.get("AGENTMEM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AGENTMEM_CHROMEDRIVER", "/usr/bin/chromedriver")
PAYLOAD = ('Hi <img src=x onerror=alert(1)> and <script>alert(2)</script> '
           '<b onmouseover="window.__pwned=1">bold</b>')
TOOL_DOMAINS = ["parcel tracking and delivery status", "email messages", "weather forecasts",
                "flight bookings", "hotel rooms", "stock quotes", "cooking recipes",
                "music playlists", "bank transfers", "calendar events", "news articles", "rental cars"]
TOOLS = [{"type": "function", "function": {
    "name": f"{verb}_{'_'.join(domain.split()[:2])}", "description": f"{verb.capitalize()} {domain}.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
    for domain in TOOL_DOMAINS for verb in ("get", "search")]
LAST_CALL = [*SESSION, {"role": "assistant", "content": "Have a nice day."},
             {"role": "user", "content": "Please email me the receipt for LH-1."}]
# The last call: tools filtered and old history pruned, even though the session is short.
PRUNE_POLICY = """name: ui-prune
stages: [tools, prune]
embed: true
tools: {max_tools: 4, min_tools: 2, min_offered: 4}
prune: {keep_recent_exchanges: 1, history_floor_tokens: 0, history_fraction: 0.5}
"""


def _chromium_missing() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    return f"not installed: {', '.join(missing)}" if missing else None


@pytest.fixture(scope="module")
def browser():
    reason = _chromium_missing()
    if reason:
        if os.environ.get("AGENTMEM_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"Chromium is required (AGENTMEM_REQUIRE_CHROMIUM=1) but {reason}")
        pytest.skip(f"Chromium/chromedriver {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="agentmem-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", f"--user-data-dir={profile}",
                 "--window-size=1440,1500"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager never looks for one on the network.
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def sessions(proxy, policy_dir):
    """Build the sessions through the proxy once: ``demo`` (quarantine, pruning, tools), ``xss``."""
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)
    (policy_dir / "ui-prune.yaml").write_text(PRUNE_POLICY)
    demo, xss = f"ui-{uuid.uuid4().hex[:10]}", f"ui-xss-{uuid.uuid4().hex[:8]}"

    def call(session_id: str, messages: list[dict], policy_name: str, **extra) -> None:
        client.chat.completions.create(model="echo", messages=messages, extra_headers={
            "X-Session-Id": session_id, "X-Agentmem-Policy": policy_name}, **extra)

    for index, message in enumerate(SESSION):  # as in test_quarantine: the claim recurs
        if message["role"] == "user":
            call(demo, SESSION[: index + 1], "guarded")
    call(demo, LAST_CALL, "ui-prune", tools=TOOLS)
    call(xss, [{"role": "user", "content": PAYLOAD}], "default")
    return {"demo": demo, "xss": xss}


def _wait(driver, condition, timeout: float = 30):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The page re-renders a session after an action: an element found mid-render may go stale.
    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def _open_session(driver, base_url: str, session_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base_url}/ui")
    selector = f'button.session[data-session="{session_id}"]'
    button = _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector))
    button.click()
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#detail .timeline .turn"))


def _page_errors(driver) -> list[str]:
    """Console errors (a CSP violation or a script error lands here), minus the favicon."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "favicon" not in e["message"]]


def test_page_headers_and_assets(proxy):
    page = httpx.get(f"{proxy.url}/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
    assert "<script" in page.text and "<script>" not in page.text  # only the external file
    script = httpx.get(f"{proxy.url}/ui/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert httpx.get(f"{proxy.url}/ui/app.css").headers["content-type"].startswith("text/css")
    assert httpx.get(f"{proxy.url}/ui/secret.py").status_code == 404
    assert httpx.get(f"{proxy.url}/ui/%2e%2e%2fui.py").status_code == 404


def test_screenshot_shows_pruned_history_tools_and_quarantine(browser, proxy, sessions, tmp_path):
    from selenium.webdriver.common.by import By

    _open_session(browser, proxy.url, sessions["demo"])
    reports = httpx.get(f"{proxy.url}/v1/sessions/{sessions['demo']}/reports").json()["data"]
    # the last call is selected: its pruned sentences are struck through, the rest highlighted
    pruned = [e for e in browser.find_elements(By.CSS_SELECTOR, ".timeline del.pruned") if e.is_displayed()]
    assert pruned and all(e.text.strip() for e in pruned)
    history = " ".join(m.get("content") or "" for m in LAST_CALL)
    assert all(e.text.strip() in history for e in pruned)
    assert "line-through" in pruned[0].value_of_css_property("text-decoration")
    assert browser.find_elements(By.CSS_SELECTOR, ".timeline mark.kept")
    # the tool loadout of that call, and one bar group per call in the tokens chart
    kept = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".tools .chip.kept-tool")]
    dropped = browser.find_elements(By.CSS_SELECTOR, ".tools .chip.dropped-tool")
    assert len(kept) == reports[-1]["tools_after"] and len(kept) + len(dropped) == len(TOOLS)
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart .bar-group")) == len(reports)
    # the quarantine records, with their reason and buttons
    record = browser.find_element(By.CSS_SELECTOR, ".quarantine .record.status-active")
    assert record.is_displayed() and "Maple Street" in record.text and "recurrence" in record.text
    assert record.find_element(By.CSS_SELECTOR, "button.release").is_enabled()

    path = tmp_path / "ui.png"
    assert browser.save_screenshot(str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    if os.environ.get("AGENTMEM_UI_SCREENSHOT"):
        shutil.copyfile(path, os.environ["AGENTMEM_UI_SCREENSHOT"])

    # an earlier call, chosen on the chart, shows what the quarantine withheld then
    browser.find_elements(By.CSS_SELECTOR, "svg.chart .bar-group")[len(reports) - 2].click()
    withheld = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".timeline .quarantined"))
    assert all("Maple Street" in e.text for e in withheld)
    assert not browser.find_elements(By.CSS_SELECTOR, ".timeline del.pruned")
    # the first call as it was: its echo reply, since superseded by the client's own history
    browser.find_element(By.CSS_SELECTOR, 'button.call[data-call="0"]').click()
    turns = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".timeline .turn"))
    assert "echo: Where is my order LH-1?" in turns[2].text and "reply of this call" in turns[2].text
    assert "superseded later" in turns[2].text
    assert all("after this call" in t.text for t in turns[3:]) and len(turns) == 3 + len(LAST_CALL) - 2
    assert _page_errors(browser) == []


def test_release_button_calls_the_api_and_refreshes(browser, proxy, sessions):
    from selenium.webdriver.common.by import By

    session_id = sessions["demo"]
    records = httpx.get(f"{proxy.url}/v1/sessions/{session_id}/quarantine",
                        params={"status": "active"}).json()["data"]
    assert records
    target = records[0]["id"]
    _open_session(browser, proxy.url, session_id)
    card = f'.record[data-record="{target}"]'
    browser.find_element(By.CSS_SELECTOR, f"{card} button.release").click()
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"{card} .status").text == "released")
    listed = httpx.get(f"{proxy.url}/v1/sessions/{session_id}/quarantine").json()["data"]
    stored = {r["id"]: r for r in listed}
    assert stored[target]["status"] == "released"
    assert stored[target]["history"][-1]["to"] == "released"
    assert not browser.find_element(By.CSS_SELECTOR, f"{card} button.release").is_enabled()
    assert all(stored[r["id"]]["status"] == "active" for r in records[1:])  # only that one
    assert _page_errors(browser) == []


def test_untrusted_text_is_shown_as_text(browser, proxy, sessions):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    _open_session(browser, proxy.url, sessions["xss"])
    turns = browser.find_elements(By.CSS_SELECTOR, ".timeline .turn .turn-text")
    texts = [t.text for t in turns]
    assert PAYLOAD in texts[0] and PAYLOAD in texts[1]  # the user message, and the echo reply
    detail = browser.find_element(By.ID, "detail")
    assert detail.find_elements(By.TAG_NAME, "img") == []
    assert detail.find_elements(By.TAG_NAME, "script") == []
    assert detail.find_elements(By.TAG_NAME, "b") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when there is no alert
    assert browser.execute_script("return window.__pwned === undefined")
    assert _page_errors(browser) == []


def test_tenant_key_is_asked_for_and_sent(browser, tenant_proxy):
    from selenium.webdriver.common.by import By

    session_id = f"ui-tenant-{uuid.uuid4().hex[:8]}"
    body = {"model": "echo", "messages": [{"role": "user", "content": "hello from alpha"}]}
    answer = httpx.post(f"{tenant_proxy.url}/v1/chat/completions", json=body, timeout=60,
                        headers={"Authorization": "Bearer key-alpha", "X-Session-Id": session_id})
    assert answer.status_code == 200

    browser.get(f"{tenant_proxy.url}/ui")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    auth = _wait(browser, lambda d: (d.find_element(By.ID, "auth")
                                     if d.find_element(By.ID, "auth").is_displayed() else None))
    assert "requires an API key" in auth.text and "401" in auth.text
    assert not browser.find_element(By.ID, "app").is_displayed()

    def submit(key: str) -> None:
        field = browser.find_element(By.ID, "auth-key")
        field.clear()
        field.send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#auth-form button[type=submit]").click()

    submit("key-wrong")
    _wait(browser, lambda d: "rejected this key" in d.find_element(By.ID, "auth-message").text)
    submit("key-beta")  # another tenant: a valid key that does not see alpha's session
    _wait(browser, lambda d: d.find_element(By.ID, "app").is_displayed())
    assert not browser.find_elements(By.CSS_SELECTOR, f'button.session[data-session="{session_id}"]')
    browser.find_element(By.ID, "key-change").click()
    submit("key-alpha")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'button.session[data-session="{session_id}"]'))
    browser.find_element(By.CSS_SELECTOR, f'button.session[data-session="{session_id}"]').click()
    turn = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#detail .timeline .turn"))
    assert "hello from alpha" in turn[0].text
    assert browser.execute_script("return sessionStorage.getItem('agentmem.apiKey')") == "key-alpha"
    errors = [m for m in _page_errors(browser) if "401" not in m]  # the rejected keys log 401s
    assert errors == []
