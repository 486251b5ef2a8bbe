"""The feed page at ``/`` in a real headless Chromium (Debian's, through its chromedriver).

Two browser contexts (two Chromium processes, two users) on the running system: the
reader signs in with the keyboard, follows the author; the author posts from the page's
composer; the reader's "new posts" banner, fed by the SSE stream, appears and brings the
post in; then latest order, the stored default, a like, infinite scroll and the expired
token state. Screenshots of each step are saved in ``tests/artifacts/browser/``
(``FEED_TEST_ARTIFACTS`` to put them elsewhere), for a person to look at.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.stack.toolchain import ensure_chromium
from services.api.http.auth import mint_token
from tests.conftest import IN_CI
from tests.support.api_server import new_user_id
from tests.support.waiting import wait_until

from .conftest import REPO, VISIBLE_S, System, feed, post

pytestmark = pytest.mark.e2e
ARTIFACTS = Path(os.environ.get("FEED_TEST_ARTIFACTS", REPO / "tests" / "artifacts")) / "browser"


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    try:
        return ensure_chromium(tmp_path_factory.mktemp("install") / "install.log")
    except Exception as exc:  # noqa: BLE001 - no root, no apt: skip locally, fail in CI
        if IN_CI:
            pytest.fail(f"chromium could not be installed: {exc}")
        pytest.skip(f"chromium is missing and could not be installed: {exc}")


class Page:
    """One browser context: its own Chromium process, profile and storage."""

    def __init__(self, paths: tuple[str, str], base: str, name: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = paths[0]
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=900,1100"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
        self.driver.get(base + "/")
        self.name = name

    def el(self, css: str):  # type: ignore[no-untyped-def]
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def wait(self, condition, what: str, timeout: float = VISIBLE_S):  # type: ignore[no-untyped-def]
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.2).until(lambda _d: condition())
        except Exception:
            self.shot(f"failed-{what.replace(' ', '-')}")
            raise AssertionError(f"{self.name}: timed out waiting for {what}; "
                                 f"status={self.text('#status')!r} error={self.text('#error')!r}")

    def text(self, css: str) -> str:
        return self.el(css).text

    def type(self, css: str, text: str, submit: bool = True) -> None:
        from selenium.webdriver.common.keys import Keys

        field = self.el(css)
        field.clear()
        field.send_keys(text + (Keys.ENTER if submit else ""))

    def items(self) -> list[str]:
        from selenium.webdriver.common.by import By

        return [li.get_attribute("data-post-id") for li in
                self.driver.find_elements(By.CSS_SELECTOR, "#feed li")]

    def shot(self, step: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(ARTIFACTS / f"{self.name}-{step}.png"))

    def sign_in(self, user: int) -> None:
        self.type("#mint-user", str(user))  # Enter submits: no mouse needed
        self.wait(lambda: self.el("#feed-section").is_displayed(), "the feed to show")
        self.wait(lambda: f"user {user}" in self.text("#whoami"), "the signed-in user")

    def close(self) -> None:
        self.driver.quit()


@pytest.fixture
def pages(chromium: tuple[str, str], system: System) -> Iterator[dict[str, Page]]:
    opened: dict[str, Page] = {}
    try:
        for name in ("reader", "author"):
            opened[name] = Page(chromium, system.api, name)
        yield opened
    finally:
        for page in opened.values():
            page.close()


def _reader_follows_author(pages: dict[str, Page], empty_shot: str | None = None) -> tuple[int, int]:
    """New users signed in on both pages; the reader follows the author from its page."""
    reader, author = pages["reader"], pages["author"]
    reader_id, author_id = new_user_id(), new_user_id()
    author.sign_in(author_id)  # first: a user exists from its first request
    reader.sign_in(reader_id)
    if empty_shot:
        reader.wait(lambda: "Nothing here yet" in reader.text("#status"), "the empty-feed message")
        reader.shot(empty_shot)
    reader.type("#follow-user", str(author_id))
    reader.wait(lambda: f"Following user {author_id}" in reader.text("#status"), "the follow")
    return reader_id, author_id


def test_a_post_from_one_browser_reaches_a_follower_through_the_banner(
        pages: dict[str, Page], system: System) -> None:
    from selenium.webdriver.common.keys import Keys

    reader, author = pages["reader"], pages["author"]
    reader_id, author_id = _reader_follows_author(pages, empty_shot="1-empty")

    text = f"hello from a browser {time.time_ns()}"
    author.type("#post-text", text, submit=False)
    author.el("#post-form button").click()
    author.wait(lambda: "Posted" in author.text("#status"), "the post to be accepted")
    author.shot("2-posted")

    reader.wait(lambda: reader.el("#new-posts").is_displayed(), "the new-posts banner")
    assert reader.text("#new-posts").startswith("1 new post")
    reader.shot("3-banner")
    reader.el("#new-posts").send_keys(Keys.ENTER)  # a button: the keyboard works it
    reader.wait(lambda: text in reader.text("#feed"), "the post in the reader's feed")
    assert not reader.el("#new-posts").is_displayed()
    reader.shot("4-post-shown")

    like = reader.el("#feed li button[aria-pressed]")
    like.click()
    reader.wait(lambda: like.get_attribute("aria-pressed") == "true", "the like")

    reader.el("input[name=order][value=latest]").click()
    reader.wait(lambda: text in reader.text("#feed"), "the latest-first feed")
    reader.el("#save-order").click()
    reader.wait(lambda: "latest order" in reader.text("#status"), "the stored default")
    with system.client(reader_id) as api:
        assert api.get("/v1/me/preferences").json() == {"feed_order": "latest"}
    reader.shot("5-latest")


def test_infinite_scroll_walks_the_cursor_and_an_expired_token_says_so(
        pages: dict[str, Page], system: System) -> None:
    reader = pages["reader"]
    reader_id, author_id = _reader_follows_author(pages)
    with system.client(author_id) as api:
        posted = [post(api, f"post {i}") for i in range(45)]
    # Every post delivered before the page reloads (the banner shows the first ones at
    # once, and a first page taken then would rightly hold fewer than 20).
    with system.client(reader_id) as api:
        wait_until(lambda: set(posted) <= set(feed(api)), timeout=VISIBLE_S, interval=0.5,
                   message="every post in the reader's feed")
    reader.wait(lambda: reader.el("#new-posts").is_displayed(), "the new-posts banner")
    reader.el("#new-posts").click()
    reader.wait(lambda: len(reader.items()) == 20, "the first page of 20")
    for _ in range(10):  # scrolling to the end loads the next pages
        reader.driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        time.sleep(0.3)
        if len(reader.items()) == len(posted):
            break
    reader.wait(lambda: len(reader.items()) == len(posted), "every page by scrolling")
    assert sorted(int(p) for p in reader.items()) == sorted(posted)
    reader.wait(lambda: reader.el("#feed-end").is_displayed(), "the end of the feed")
    reader.shot("6-scrolled")

    expired = mint_token(reader_id, system.settings.jwt_secret.get_secret_value(), ttl_seconds=-60)
    reader.type("#token-input", expired)
    reader.wait(lambda: "expired" in reader.text("#error"), "the expired-token message")
    assert not reader.el("#feed-section").is_displayed()
    reader.shot("7-expired-token")
