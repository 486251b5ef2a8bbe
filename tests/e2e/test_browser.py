"""The feed page at ``/`` in a real headless Chromium (Debian's, through its chromedriver).

Two browser contexts (two Chromium processes, two users) on the running system: the
reader signs in with the keyboard, follows the author; the author posts from the page's
composer; the reader's "new posts" banner, fed by the SSE stream, appears and brings the
post in; then latest order, the stored default, a like, infinite scroll and the expired
token state. A third test covers the social side: the author edits their profile on the
page (a 422 and a 409 shown as the API words them, then saved), the reader's feed shows
"Display Name (@handle)", an author's link opens their profile (names, counts, timeline
with "load more"), likes toggle with their count, a mute takes the author's posts out of
the feed view, and an unfollow from the profile. Screenshots of each step are saved in
``tests/artifacts/browser/`` (``FEED_TEST_ARTIFACTS`` to put them elsewhere), for a
person to look at.
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

from .conftest import REPO, VISIBLE_S, System, feed, follow_authors, post

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
                                 f"status={self.text('#status')!r} error={self.text('#error')!r} "
                                 f"items listed={len(self.items())}")

    def text(self, css: str) -> str:
        return self.el(css).text

    def type(self, css: str, text: str, submit: bool = True) -> None:
        from selenium.webdriver.common.keys import Keys

        field = self.el(css)
        field.clear()
        field.send_keys(text + (Keys.ENTER if submit else ""))

    def items(self, css: str = "#feed li") -> list[str]:
        """The listed post ids, read in one script (a list replaced meanwhile cannot
        leave a stale element behind)."""
        ids: list[str] = self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((li) => li.dataset.postId);", css)
        return ids

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
    def scrolled_to_the_end() -> bool:  # scrolling to the end loads the next pages
        reader.driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        return len(reader.items()) == len(posted)
    reader.wait(scrolled_to_the_end, "every page by scrolling")
    assert sorted(int(p) for p in reader.items()) == sorted(posted)
    reader.wait(lambda: reader.el("#feed-end").is_displayed(), "the end of the feed")
    reader.shot("6-scrolled")

    expired = mint_token(reader_id, system.settings.jwt_secret.get_secret_value(), ttl_seconds=-60)
    reader.type("#token-input", expired)
    reader.wait(lambda: "expired" in reader.text("#error"), "the expired-token message")
    assert not reader.el("#feed-section").is_displayed()
    reader.shot("7-expired-token")


def _set_names(system: System, user: int, handle: str, display_name: str) -> None:
    with system.client(user) as api:
        r = api.put("/v1/me/profile", json={"handle": handle, "display_name": display_name})
        assert r.status_code == 200, r.text


def _named_in_feed(system: System, reader: int, posts: dict[int, str]) -> bool:
    """Every post in the reader's feed (API), each with its author's display name."""
    with system.client(reader) as api:
        page = api.get("/v1/feed", params={"limit": 50, "order": "latest"}).json()
    names = {int(i["post_id"]): i["author_display_name"] for i in page["items"]}
    return all(names.get(pid) == name for pid, name in posts.items())


def test_names_profiles_likes_mute_unfollow_and_the_profile_form(
        pages: dict[str, Page], system: System) -> None:
    from selenium.webdriver.common.keys import Keys

    reader, author = pages["reader"], pages["author"]
    reader_id, author_id = _reader_follows_author(pages)
    tag = f"{time.time_ns() % 10**9}"
    taken, ada, bob = f"taken_{tag}", f"ada_{tag}", f"bob_{tag}"
    holder, other = new_user_id(), new_user_id()
    _set_names(system, holder, taken, "Holder")

    # The author edits their profile on the page: a 422, a 409, then saved.
    author.el("#nav-me").send_keys(Keys.ENTER)
    author.wait(lambda: author.el("#profile-form").is_displayed(), "the profile form")
    author.type("#profile-edit-handle", "has space", submit=False)
    author.type("#profile-edit-display", "Ada Lovelace")       # Enter submits
    author.wait(lambda: "Handle: 3" in author.text("#profile-form-error"), "the 422 message")
    assert author.el("#profile-edit-handle").get_attribute("aria-invalid") == "true"
    author.shot("8-profile-422")
    author.type("#profile-edit-handle", taken.upper())
    author.wait(lambda: "Handle is taken" in author.text("#profile-form-error"), "the 409 message")
    author.shot("9-profile-409")
    author.type("#profile-edit-handle", ada)
    author.wait(lambda: f"Ada Lovelace (@{ada})" in author.text("#whoami"), "the saved profile")
    assert not author.el("#profile-form-error").is_displayed()
    assert author.text("#profile-name") == "Ada Lovelace"
    author.shot("10-profile-saved")
    with system.client(author_id) as api:
        assert api.get(f"/v1/users/{author_id}").json()["handle"] == ada

    # A second author the reader follows; posts from both, the first with a full page more.
    _set_names(system, other, bob, "Bob Builder")
    follow_authors(system, reader_id, [other])
    with system.client(author_id) as api:
        ada_posts = [post(api, f"ada says {i}") for i in range(22)]
    with system.client(other) as api:
        bob_post = post(api, "bob says hi")
    wait_until(lambda: _named_in_feed(system, reader_id, {ada_posts[-1]: "Ada Lovelace",
                                                          bob_post: "Bob Builder"}),
               timeout=VISIBLE_S, interval=0.5, message="both posts in the feed, with names")
    with system.client(reader_id) as api:
        wait_until(lambda: len(api.get(f"/v1/users/{author_id}/posts",
                                       params={"limit": 100}).json()["items"]) == 22,
                   timeout=VISIBLE_S, interval=0.5, message="the author's timeline")

    # Names on the feed's items.
    reader.driver.refresh()                                   # the page signs in again
    reader.wait(lambda: len(reader.items()) > 0, "the feed after a reload")
    reader.el("input[name=order][value=latest]").click()
    reader.wait(lambda: f"Bob Builder (@{bob})" in reader.text("#feed"), "the names in the feed")
    assert f"Ada Lovelace (@{ada})" in reader.text("#feed")
    reader.shot("11-names")

    # A like on a feed item: pressed, and its count.
    bob_item = f'#feed li[data-post-id="{bob_post}"]'
    like = reader.el(f"{bob_item} button.like")
    assert like.get_attribute("aria-pressed") == "false"
    assert reader.text(f"{bob_item} .like-count") == "0 likes"
    like.send_keys(Keys.SPACE)                                # a button: the keyboard works it
    reader.wait(lambda: like.get_attribute("aria-pressed") == "true", "the like")
    assert reader.text(f"{bob_item} .like-count") == "1 like"
    reader.shot("12-liked")
    with system.client(reader_id) as api:
        wait_until(lambda: api.get(f"/v1/posts/{bob_post}").json()["liked"] is True,
                   timeout=10, interval=0.2, message="the like stored")

    # The author's link opens their profile: names, counts, toggles, timeline.
    reader.el(f'#feed li[data-author-id="{author_id}"] a.author').send_keys(Keys.ENTER)
    reader.wait(lambda: reader.el("#profile-section").is_displayed()
                and reader.text("#profile-name") == "Ada Lovelace", "the author's profile")
    assert reader.driver.current_url.endswith(f"#/users/{author_id}")
    assert f"@{ada}" in reader.text("#profile-handle")
    assert reader.text("#profile-followers") == "1 follower"
    assert reader.el("#profile-follow").get_attribute("aria-pressed") == "true"
    assert reader.el("#profile-mute").get_attribute("aria-pressed") == "false"
    assert not reader.el("#profile-form").is_displayed()      # someone else's profile
    assert not reader.el("#feed-section").is_displayed()
    reader.wait(lambda: len(reader.items("#timeline li")) == 20, "the timeline's first page")
    reader.shot("13-profile")
    # "Load more posts" until the walk ends: a page reads at most 128 days, so the walk
    # down to the id epoch may take a click or two after the last post.
    def settled() -> bool:
        return reader.el("#timeline").get_attribute("aria-busy") == "false"

    for _ in range(6):
        if not reader.el("#timeline-more").is_displayed():
            break
        reader.el("#timeline-more").click()
        reader.wait(settled, "the timeline's next page")
    assert len(reader.items("#timeline li")) == 22
    assert sorted(int(p) for p in reader.items("#timeline li")) == sorted(ada_posts)
    assert reader.el("#timeline-end").is_displayed() and not reader.el("#timeline-more").is_displayed()
    assert f"Ada Lovelace (@{ada})" in reader.text("#timeline li")

    # A like on a timeline item, then its unlike: the count follows.
    first = f'#timeline li[data-post-id="{ada_posts[-1]}"]'
    tl_like = reader.el(f"{first} button.like")
    tl_like.click()
    reader.wait(lambda: tl_like.get_attribute("aria-pressed") == "true"
                and reader.text(f"{first} .like-count") == "1 like", "the timeline like")
    reader.shot("14-timeline-liked")
    tl_like.click()
    reader.wait(lambda: tl_like.get_attribute("aria-pressed") == "false"
                and reader.text(f"{first} .like-count") == "0 likes", "the timeline unlike")
    with system.client(reader_id) as api:
        assert api.get(f"/v1/posts/{ada_posts[-1]}").json()["liked"] is False

    # Mute: the toggle, the API's truth, and the author's posts gone from the feed view.
    reader.el("#profile-mute").send_keys(Keys.SPACE)
    reader.wait(lambda: "Muted Ada Lovelace" in reader.text("#status"), "the mute")
    assert reader.el("#profile-mute").get_attribute("aria-pressed") == "true"
    with system.client(reader_id) as api:
        assert api.get(f"/v1/users/{author_id}").json()["muted"] is True
    reader.shot("15-muted")
    reader.el("#back").click()
    reader.wait(lambda: reader.el("#feed-section").is_displayed()
                and str(bob_post) in reader.items(), "the feed again")
    reader.wait(lambda: not set(map(str, ada_posts)) & set(reader.items()), "the muted posts gone")
    assert reader.driver.find_elements("css selector", f'#feed li[data-author-id="{author_id}"]') == []
    reader.shot("16-feed-after-mute")

    # The profile after a reload says muted (the API's truth, not the page's memory).
    reader.driver.get(f"{system.api}/#/users/{author_id}")
    reader.driver.refresh()                                   # a new document, not a hash change
    reader.wait(lambda: reader.el("#profile-section").is_displayed()
                and reader.text("#profile-name") == "Ada Lovelace", "the profile by its address")
    reader.wait(lambda: reader.el("#profile-mute").get_attribute("aria-pressed") == "true",
                "the mute as the API says")

    # Unfollow from Bob's profile: the toggle, the count, the API, the feed.
    reader.el("#back").click()
    reader.wait(lambda: str(bob_post) in reader.items(), "the feed with Bob's post")
    reader.el(f'{bob_item} a.author').click()
    reader.wait(lambda: reader.text("#profile-name") == "Bob Builder"
                and reader.el("#profile-follow").get_attribute("aria-pressed") == "true",
                "Bob's profile, followed")
    assert reader.el(f'#timeline li[data-post-id="{bob_post}"] button.like') \
        .get_attribute("aria-pressed") == "true"              # the like from the feed
    reader.el("#profile-follow").click()
    reader.wait(lambda: "Unfollowed Bob Builder" in reader.text("#status"), "the unfollow")
    assert reader.el("#profile-follow").get_attribute("aria-pressed") == "false"
    assert reader.text("#profile-followers") == "0 followers"
    with system.client(reader_id) as api:
        assert api.get(f"/v1/users/{other}").json()["following"] is False
    reader.shot("17-unfollowed")
    reader.el("#nav-feed").click()
    reader.wait(lambda: str(bob_post) not in reader.items(), "Bob's post gone from the feed")
    reader.shot("18-feed-after-unfollow")
