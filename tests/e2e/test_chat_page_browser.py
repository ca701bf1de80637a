"""The chat page at ``/``, driven in a real headless Chromium (Debian's, through its chromedriver).

``.ci/run`` installs Chromium when it is missing; elsewhere the test is skipped
when there is no Chromium, and fails under ``CI=true``. The server requires an
API key, so the page must ask for it. Stopping is made deterministic by
pausing generation once the answer has started: the stop button then aborts a
request that is certainly still running, and the server must end up with
nothing running and no KV held for it. ``TERCET_CHAT_SCREENSHOT=<path>`` saves
the page as the test leaves it (the README's screenshot comes from there).
"""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

API_KEY = "browser-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
WAIT = 120  # seconds for any one state to be reached; far above what a busy machine needs
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

if not (CHROMIUM and CHROMEDRIVER):
    message = "Chromium and its chromedriver are not installed (Debian: apt-get install chromium chromium-driver)"
    if os.environ.get("CI") == "true":
        raise RuntimeError(message + "; .ci/run installs them")
    pytest.skip(message, allow_module_level=True)

from selenium import webdriver  # noqa: E402 (after the check: skipped without a browser)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir, tiny_adapters):
    adapters = f"lora.adapters=attention={tiny_adapters['attention']}"
    return start_server(tiny_llama_dir, [*TINY_SETTINGS, f"server.api_key={API_KEY}", adapters, "lora.max_rank=8"])


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,760"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_for(browser, condition, what: str):
    return WebDriverWait(browser, WAIT).until(lambda _: condition(), message=f"waiting for {what}")


def text_of(browser, selector: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, selector).text


def answers(browser):
    return browser.find_elements(By.CSS_SELECTOR, ".message.assistant")


def set_field(browser, selector: str, value: str) -> None:
    field = browser.find_element(By.CSS_SELECTOR, selector)
    field.clear()
    field.send_keys(value)


def say(browser, text: str) -> None:
    browser.find_element(By.CSS_SELECTOR, "#prompt").send_keys(text, Keys.ENTER)


def server_is_idle(server) -> bool:
    ranks = httpx.get(server.base_url + "/get_server_info", headers=AUTH, timeout=WAIT).json()["ranks"]
    # Nothing running or waiting, and every KV page not held by the prefix cache is free.
    return all(
        rank["num_running_requests"] == 0 and rank["num_waiting_requests"] == 0
        and rank["kv_used_tokens"] == rank["prefix_cache_tokens"]
        for rank in ranks
    )


def test_chat_streams_keeps_the_conversation_and_stops(server, browser):
    browser.get(server.base_url + "/")
    wait_for(browser, lambda: "API key" in text_of(browser, "#status"), "the page to ask for the API key")
    set_field(browser, "#api-key", API_KEY + Keys.TAB)  # leaving the field saves it and connects
    model = httpx.get(server.base_url + "/v1/models", headers=AUTH, timeout=WAIT).json()["data"][0]["id"]
    wait_for(browser, lambda: text_of(browser, "#model") == model, "the model name")
    assert text_of(browser, "#status") == "ready"
    # The sampling settings are on the page, with their defaults.
    assert browser.find_element(By.CSS_SELECTOR, "#temperature").get_attribute("value") == "0.7"

    # A short answer, streamed to the end.
    set_field(browser, "#max-tokens", "12")
    say(browser, "Hello there")
    wait_for(browser, lambda: answers(browser) and answers(browser)[0].get_attribute("data-state") == "done",
             "the first answer to finish")
    first = answers(browser)[0].text
    assert "finish: length" in first and first.replace("finish: length", "").strip(), first
    assert float(text_of(browser, "#tokens-per-second")) > 0

    # A long answer, stopped half-way: generation is paused once text has arrived,
    # so the request is certainly still running when the button is pressed.
    set_field(browser, "#max-tokens", "600")
    say(browser, "Tell me a long story")
    wait_for(browser, lambda: len(answers(browser)) == 2 and answers(browser)[1].text.strip(),
             "the second answer to start")
    assert httpx.post(server.base_url + "/pause_generation", headers=AUTH, timeout=WAIT).status_code == 200
    try:
        assert answers(browser)[1].get_attribute("data-state") == "streaming"
        browser.find_element(By.CSS_SELECTOR, "#stop").click()
        wait_for(browser, lambda: answers(browser)[1].get_attribute("data-state") == "stopped", "the stop")
    finally:
        assert httpx.post(server.base_url + "/continue_generation", headers=AUTH, timeout=WAIT).status_code == 200
    wait_for(browser, lambda: server_is_idle(server), "the server to have nothing running")
    stopped_text = answers(browser)[1].text
    assert stopped_text.endswith("stopped")

    # Both exchanges stay in the conversation the next request sends.
    conversation = browser.execute_script("return conversation.map(turn => turn.role)")
    assert conversation == ["user", "assistant", "user", "assistant"]
    assert browser.find_element(By.CSS_SELECTOR, "#send").is_enabled()
    assert not browser.find_element(By.CSS_SELECTOR, "#stop").is_enabled()
    screenshot = os.environ.get("TERCET_CHAT_SCREENSHOT")
    if screenshot:
        browser.save_screenshot(screenshot)


def test_a_failed_turn_leaves_no_empty_answer_and_is_not_sent_again(server, browser):
    browser.get(server.base_url + "/")  # the key is remembered
    wait_for(browser, lambda: text_of(browser, "#status") == "ready", "the page to connect")
    # More tokens than the model's context: the server refuses the request (400).
    set_field(browser, "#max-tokens", "999999999")
    say(browser, "This one fails")
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, ".message.error"), "the error")
    assert "max_tokens" in text_of(browser, ".message.error")
    assert answers(browser) == []  # no empty answer bubble
    assert browser.execute_script("return conversation.length") == 0
    assert browser.find_element(By.CSS_SELECTOR, "#send").is_enabled()

    set_field(browser, "#max-tokens", "4")
    sent = browser.execute_script("""
        window.sentBodies = [];
        const send = window.fetch;
        window.fetch = (url, options) => { if (options && options.body) sentBodies.push(JSON.parse(options.body)); return send(url, options); };
    """)
    assert sent is None
    say(browser, "This one works")
    wait_for(browser, lambda: answers(browser) and answers(browser)[0].get_attribute("data-state") == "done",
             "the answer")
    [body] = browser.execute_script("return sentBodies")
    assert [message["content"] for message in body["messages"]] == ["This one works"]


def test_the_page_loads_without_the_key_and_nothing_else_does(server):
    page = httpx.get(server.base_url + "/", timeout=WAIT)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="stop"' in page.text
    assert httpx.get(server.base_url + "/v1/models", timeout=WAIT).status_code == 401
    icon = httpx.get(server.base_url + "/favicon.ico", timeout=WAIT)
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_a_chat_can_run_with_a_lora_adapter(server, browser):
    from selenium.webdriver.support.ui import Select

    browser.get(server.base_url + "/")
    set_field(browser, "#api-key", API_KEY + Keys.TAB)
    wait_for(browser, lambda: "attention" in text_of(browser, "#adapter"), "the adapter among the choices")
    Select(browser.find_element(By.CSS_SELECTOR, "#adapter")).select_by_value("attention")
    set_field(browser, "#max-tokens", "4")
    say(browser, "Hello")
    wait_for(browser, lambda: answers(browser) and answers(browser)[-1].get_attribute("data-state") == "done",
             "the answer to finish")
    # The rank's figures reach /metrics between its steps: wait for the request to show there.
    def requests_with_the_adapter() -> float:
        metrics = httpx.get(server.base_url + "/metrics", headers=AUTH, timeout=WAIT).text
        lines = [line for line in metrics.splitlines()
                 if line.startswith("tercet:lora_requests_total{") and 'lora_name="attention"' in line]
        return float(lines[0].split()[-1]) if lines else 0.0

    wait_for(browser, lambda: requests_with_the_adapter() >= 1, "the adapter's request in /metrics")
