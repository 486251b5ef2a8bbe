// The feed page: the public API (/v1/...) with a bearer token, nothing else. No build step.
"use strict";

const PAGE = 20;
const $ = (id) => document.getElementById(id);
const state = {
  token: null, userId: null, order: "ranked", cursor: null, version: null,
  shown: new Set(), loading: false, fresh: 0, stream: null, lastEventId: null, retryTimer: null,
  // The profile view (#/users/{id}): which one, its data and timeline cursor; feedStale:
  // a follow, unfollow, mute or unmute since the feed was read (reread when shown again).
  profile: null, profileSeq: 0, feedStale: false,
  sentinel: null,  // the IntersectionObserver that reads on at the end of the list
};
let controlIds = 0;

class ApiError extends Error {
  constructor(status, problem, retryAfter) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status; this.problem = problem || {}; this.retryAfter = retryAfter;
  }
}

async function api(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (state.token) init.headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) throw new ApiError(response.status, data, Number(response.headers.get("Retry-After") || 0));
  return data;
}

function say(text) { $("status").textContent = text; }

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = !text;
}

function failed(error, retry) {
  if (!(error instanceof ApiError)) { showError(`Network error: ${error.message}. Check that the API is running.`); return; }
  if (error.status === 401) {
    showError("Your token is invalid or has expired. Mint or paste a new one.");
    signOut(false);
  } else if (error.status === 503) {
    const wait = Math.max(1, error.retryAfter || 1);
    showError(`The feed is unavailable right now (503). Retrying in ${wait} s.`);
    if (retry) { clearTimeout(state.retryTimer); state.retryTimer = setTimeout(retry, wait * 1000); }
  } else {
    showError(`${error.problem.title || "Error"}: ${error.message}`);
  }
}

function subjectOf(token) {
  try {
    const payload = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return String(payload.sub);
  } catch { return null; }
}

function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

function button(label, onClick, extra = {}) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = label; b.className = "secondary";
  Object.entries(extra).forEach(([k, v]) => b.setAttribute(k, v));
  b.addEventListener("click", onClick);
  return b;
}

// A user as a reader knows them: their display name and handle when they set them,
// their id otherwise.
function nameOf(handle, displayName, id) {
  const at = handle ? `@${handle}` : "";
  if (displayName) return at ? `${displayName} (${at})` : displayName;
  return at || `User ${id}`;
}

function authorName(item) { return nameOf(item.author_handle, item.author_display_name, item.author_id); }

function likesText(count) { return count === null ? "" : `${count} like${count === 1 ? "" : "s"}`; }

// A like toggle (aria-pressed) and the count beside it. Optimistic: the button and count
// change at once and go back if the API refuses; a 2xx keeps them (the API answers no
// count: the count copy lags the like by the pipeline, a reread would show the old one).
// Every copy of the post on the page (feed and timeline) follows.
function likeControls(item) {
  let liked = item.liked === true;
  // The count lags the caller's own like (the copy), never the other way: at least 1.
  let count = typeof item.like_count === "number" ? Math.max(item.like_count, liked ? 1 : 0) : null;
  let pending = false;
  const countId = `likes-${++controlIds}`;
  const label = document.createElement("span");
  label.className = "like-count"; label.id = countId;
  const like = button("Like", async () => {
    if (pending) return;
    pending = true;
    const before = [liked, count];
    const want = !liked;
    syncLike(item.post_id, want, count === null ? null : Math.max(0, count + (want ? 1 : -1)));
    try {
      await api(`/v1/posts/${item.post_id}/like`, { method: want ? "PUT" : "DELETE" });
    } catch (e) {
      syncLike(item.post_id, ...before);
      if (e instanceof ApiError && e.status === 404) showError("This post is no longer available: it cannot be liked.");
      else failed(e);
    } finally { pending = false; }
  }, { "aria-pressed": String(liked), "aria-describedby": countId, class: "secondary like" });
  const show = (nowLiked, nowCount) => {
    liked = nowLiked; count = nowCount;
    like.setAttribute("aria-pressed", String(liked));
    label.textContent = likesText(count);
  };
  show(liked, count);
  return { controls: [like, label], show };
}

function syncLike(postId, liked, count) {
  document.querySelectorAll(`li[data-post-id="${postId}"]`).forEach((li) => li.showLike && li.showLike(liked, count));
}

function render(item, { unfollow = true } = {}) {
  const li = document.createElement("li");
  li.dataset.postId = item.post_id;
  li.dataset.authorId = item.author_id;
  const meta = document.createElement("div");
  meta.className = "meta";
  const who = authorName(item);
  const author = document.createElement("a");
  author.className = "author"; author.href = `#/users/${item.author_id}`; author.textContent = who;
  meta.append(author, ` · ${age(item.created_at)}`);
  const text = document.createElement("p");
  text.className = "text";
  text.textContent = item.text;
  const actions = document.createElement("div");
  actions.className = "actions";
  const like = likeControls(item);
  li.showLike = like.show;
  actions.append(...like.controls);
  if (unfollow && item.author_id !== state.userId) {
    actions.append(button(`Unfollow ${who}`, async () => {
      try {
        await api(`/v1/users/${item.author_id}/follow`, { method: "DELETE" });
        state.feedStale = true;
        say(`Unfollowed ${who}: their posts leave your feed on the next page.`);
      } catch (e) { failed(e); }
    }));
  }
  li.append(meta, text, actions);
  return li;
}

function showPage(page, replace) {
  if (replace) { $("feed").replaceChildren(); state.shown.clear(); }
  for (const item of page.items) {
    if (state.shown.has(item.post_id)) continue;
    state.shown.add(item.post_id);
    $("feed").append(render(item));
  }
  state.cursor = page.next_cursor;
  state.version = page.feed_version;
  $("more").hidden = !state.cursor;
  $("feed-end").hidden = Boolean(state.cursor) || state.shown.size === 0;
  if (replace && state.shown.size === 0) say("Nothing here yet: follow someone, or post something.");
  const warnings = page.warnings || [];
  if (warnings.includes("snapshot_expired")) {
    say("Your feed was refreshed: the ranking you were reading had expired.");
  }
  if (replace && warnings.includes("regenerating")) {
    say("Welcome back: your feed is being rebuilt; refresh in a moment for everything.");
  }
}

async function loadFirst() {
  if (!state.token) return;
  state.loading = true;
  try {
    const page = await api(`/v1/feed?limit=${PAGE}&order=${state.order}`);
    showError("");
    state.fresh = 0;
    $("new-posts").hidden = true;
    showPage(page, true);
  } catch (e) { failed(e, loadFirst); return; } finally { state.loading = false; }
  readOnFromHere();
}

async function loadMore() {
  if (!state.token || !state.cursor || state.loading) return;
  state.loading = true;
  try {
    const page = await api(`/v1/feed?limit=${PAGE}&cursor=${encodeURIComponent(state.cursor)}`);
    showError("");
    const restarted = (page.warnings || []).includes("snapshot_expired");
    showPage(page, restarted);
  } catch (e) {
    if (e instanceof ApiError && e.status === 400) { say("Starting again from the top."); await loadFirst(); }
    else failed(e, loadMore);
    return;
  } finally { state.loading = false; }
  readOnFromHere();
}

// After a page is shown. The observer reports only changes of the sentinel's state, as
// measured at a rendering step: one that last saw it in view (an empty feed, a page
// still loading) and was not given a frame before the user scrolled back to the end
// reports nothing. Observing it again makes the next frame report its state afresh;
// and if this page left it in view (a short page, a tall window), read on at once.
function readOnFromHere() {
  if (state.sentinel) { state.sentinel.unobserve($("sentinel")); state.sentinel.observe($("sentinel")); }
  if (sentinelInView()) loadMore();
}

function sentinelInView() {
  const box = $("sentinel").getBoundingClientRect();
  return box.top < window.innerHeight && box.bottom >= 0 && !$("feed-section").hidden;
}

function announce(count) {
  const banner = $("new-posts");
  banner.textContent = count > 0 ? `${count} new post${count === 1 ? "" : "s"}: show` : "New posts: refresh";
  banner.hidden = false;
}

async function readStream(signal) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
  const response = await fetch(`/v1/feed/stream?feed_version=${encodeURIComponent(state.version || "live")}`,
                               { headers, signal });
  if (!response.ok) throw new ApiError(response.status, null, Number(response.headers.get("Retry-After") || 0));
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const event = { event: "message", data: "" };
      for (const line of block.split(/\r?\n/)) {
        if (!line || line.startsWith(":")) continue;
        const at = line.indexOf(":");
        const field = at < 0 ? line : line.slice(0, at);
        const text = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
        if (field === "data") event.data += text;
        else event[field] = text;
      }
      if (event.id) state.lastEventId = event.id;
      if (event.event === "new_item") {
        const postId = JSON.parse(event.data).post_id;
        if (!state.shown.has(postId)) { state.fresh += 1; announce(state.fresh); }
      } else if (event.event === "resync") {
        announce(0);
      }
    }
  }
}

async function keepStreaming() {
  const control = new AbortController();
  state.stream = control;
  let wait = 1;
  while (state.stream === control) {
    try {
      await readStream(control.signal);
      wait = 1;
    } catch (e) {
      if (control.signal.aborted) return;
      if (e instanceof ApiError && e.status === 401) { failed(e); return; }
      wait = Math.min(30, Math.max(wait * 2, (e.retryAfter || 0)));
    }
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
  }
}

// ---- The profile view: #/users/{id} ------------------------------------------------

function profileRoute() {
  const match = location.hash.match(/^#\/users\/([1-9][0-9]{0,18})$/);
  return match ? match[1] : null;
}

function route() {
  if (!state.token) return;
  const id = profileRoute();
  if (id) openProfile(id); else showFeed();
}

function showView(profile) {
  $("profile-section").hidden = !profile;
  $("compose").hidden = profile;
  $("feed-section").hidden = profile;
}

function showFeed() {
  const fromProfile = state.profile !== null;
  state.profile = null; state.profileSeq += 1;
  showView(false);
  if (state.feedStale) { state.feedStale = false; loadFirst(); }
  if (fromProfile) $("feed").focus();
}

function setPressed(id, on) { $(id).setAttribute("aria-pressed", String(Boolean(on))); }

function showRelation() {
  const user = state.profile.data;
  $("profile-followers").textContent = `${user.followers_count} follower${user.followers_count === 1 ? "" : "s"}`;
  $("profile-following").textContent = `${user.following_count} following`;
  setPressed("profile-follow", user.following);
  setPressed("profile-mute", user.muted);
}

function showProfile(user) {
  state.profile.data = user;
  $("profile-name").textContent = user.display_name || (user.handle ? `@${user.handle}` : `User ${user.user_id}`);
  $("profile-handle").textContent = [user.handle && `@${user.handle}`, `user ${user.user_id}`].filter(Boolean).join(" · ");
  const mine = user.user_id === state.userId;
  $("profile-actions").hidden = mine;
  $("profile-form").hidden = !mine;
  if (mine) {
    $("profile-edit-handle").value = user.handle || "";
    $("profile-edit-display").value = user.display_name || "";
    formError("");
  }
  showRelation();
}

// A timeline page reads at most 128 days, so it may hold fewer posts than asked (even
// none) and still have a next_cursor: read on, a few pages at most, until the page is
// full or the walk ends, so a click shows posts when there are any and "Load more"
// stays only while there may be more.
async function timelinePage(id, cursor) {
  const items = [];
  let next = cursor;
  for (let reads = 0; reads < 4; reads += 1) {
    const query = `limit=${PAGE - items.length}` + (next ? `&cursor=${encodeURIComponent(next)}` : "");
    const page = await api(`/v1/users/${id}/posts?${query}`);
    items.push(...page.items);
    next = page.next_cursor;
    if (items.length >= PAGE || !next) break;
  }
  return { items, next_cursor: next };
}

function showTimeline(page, replace) {
  const list = $("timeline");
  if (replace) list.replaceChildren();
  for (const item of page.items) {
    if (!list.querySelector(`li[data-post-id="${item.post_id}"]`)) list.append(render(item, { unfollow: false }));
  }
  state.profile.cursor = page.next_cursor;
  $("timeline-more").hidden = !page.next_cursor;
  $("timeline-end").hidden = Boolean(page.next_cursor);
  $("timeline-end").textContent = list.children.length ? "No more posts." : "No posts yet.";
}

async function openProfile(id) {
  const seq = ++state.profileSeq;
  state.profile = { id, data: null, cursor: null, loading: true, pending: false };
  showView(true);
  $("profile-name").textContent = `User ${id}`;
  $("profile-handle").textContent = "Loading…";
  $("profile-followers").textContent = ""; $("profile-following").textContent = "";
  $("profile-actions").hidden = true; $("profile-form").hidden = true;
  $("timeline").replaceChildren();
  $("timeline").setAttribute("aria-busy", "true");
  $("timeline-more").hidden = true; $("timeline-end").hidden = true;
  try {
    const [user, page] = await Promise.all([api(`/v1/users/${id}`), timelinePage(id, null)]);
    if (seq !== state.profileSeq) return;
    showError("");
    showProfile(user);
    showTimeline(page, true);
    $("profile-name").focus();
  } catch (e) {
    if (seq !== state.profileSeq) return;
    if (e instanceof ApiError && e.status === 404) {
      $("profile-handle").textContent = "";
      showError("No such user: they do not exist, or a block stands between you.");
    } else failed(e, () => { if (profileRoute() === id) openProfile(id); });
  } finally {
    if (seq === state.profileSeq) { state.profile.loading = false; $("timeline").setAttribute("aria-busy", "false"); }
  }
}

async function timelineMore() {
  const profile = state.profile;
  if (!profile || !profile.cursor || profile.loading) return;
  profile.loading = true;
  $("timeline").setAttribute("aria-busy", "true");
  const seq = state.profileSeq;
  try {
    const page = await timelinePage(profile.id, profile.cursor);
    if (seq !== state.profileSeq) return;
    showError("");
    showTimeline(page, false);
  } catch (e) {
    if (seq !== state.profileSeq) return;
    if (e instanceof ApiError && e.status === 400) { say("Starting the posts again from the top."); openProfile(profile.id); }
    else failed(e);
  } finally { profile.loading = false; $("timeline").setAttribute("aria-busy", "false"); }
}

function hideAuthorInFeed(authorId) {
  document.querySelectorAll(`#feed li[data-author-id="${authorId}"]`).forEach((li) => {
    state.shown.delete(li.dataset.postId);
    li.remove();
  });
}

// Follow and mute toggles: optimistic (the button and the follower count change at once)
// and put back when the API refuses. What the profile said comes from the truth (the
// API's following and muted), so the toggles start as they stand.
async function toggle(kind) {
  const profile = state.profile;
  if (!profile || !profile.data || profile.pending) return;
  const user = profile.data;
  const field = kind === "follow" ? "following" : "muted";
  const on = !user[field];
  const before = { ...user };
  const who = nameOf(user.handle, user.display_name, user.user_id);
  profile.pending = true;
  user[field] = on;
  if (kind === "follow") user.followers_count = Math.max(0, user.followers_count + (on ? 1 : -1));
  showRelation();
  try {
    await api(`/v1/users/${user.user_id}/${kind}`, { method: on ? "PUT" : "DELETE" });
    state.feedStale = true;
    if (kind === "mute" && on) hideAuthorInFeed(user.user_id);
    say({
      "follow:true": `Following ${who}: their new posts will appear in your feed.`,
      "follow:false": `Unfollowed ${who}: their posts leave your feed.`,
      "mute:true": `Muted ${who}: their posts are hidden from your feed (they are not told).`,
      "mute:false": `Unmuted ${who}: their posts come back to your feed.`,
    }[`${kind}:${on}`]);
  } catch (e) {
    Object.assign(user, before);
    if (state.profile === profile) showRelation();
    failed(e);
  } finally { profile.pending = false; }
}

// ---- Editing one's own profile ------------------------------------------------------

function formError(text) {
  const box = $("profile-form-error");
  box.textContent = text;
  box.hidden = !text;
  if (!text) ["profile-edit-handle", "profile-edit-display"].forEach((id) => $(id).removeAttribute("aria-invalid"));
}

const FIELD_RULES = {
  handle: ["profile-edit-handle", "Handle: 3–30 letters, digits or underscores (no spaces)."],
  display_name: ["profile-edit-display", "Display name: 1–64 characters, no control characters."],
};

// A 409 or 422 problem+json as the form shows it: the title, then what to change.
function problemText(error) {
  const problem = error.problem;
  const parts = [];
  for (const item of problem.errors || []) {
    const rule = FIELD_RULES[(item.loc || []).slice(-1)[0]];
    if (rule) { $(rule[0]).setAttribute("aria-invalid", "true"); parts.push(rule[1]); }
    else parts.push(item.msg);
  }
  if (error.status === 409) $("profile-edit-handle").setAttribute("aria-invalid", "true");
  if (!parts.length) parts.push(problem.detail || error.message);
  return `${problem.title || "Error"}: ${parts.join(" ")}`;
}

async function saveProfile(event) {
  event.preventDefault();
  const handle = $("profile-edit-handle").value.trim();
  const display = $("profile-edit-display").value;
  formError("");
  try {
    const saved = await api("/v1/me/profile", {
      method: "PUT", body: { handle: handle || null, display_name: display.trim() ? display : null } });
    showWhoami(saved);
    if (state.profile && state.profile.data && state.profile.id === state.userId) {
      showProfile({ ...state.profile.data, handle: saved.handle, display_name: saved.display_name });
    }
    say("Profile saved. Your posts show the new name within a few seconds.");
  } catch (e) {
    if (e instanceof ApiError && (e.status === 409 || e.status === 422)) {
      formError(problemText(e));
      $(e.status === 409 || !$("profile-edit-display").getAttribute("aria-invalid")
        ? "profile-edit-handle" : "profile-edit-display").focus();
    } else failed(e);
  }
}

function showWhoami(user) {
  const named = user && (user.handle || user.display_name);
  $("whoami").textContent = named
    ? `Signed in as ${nameOf(user.handle, user.display_name, user.user_id)}, user ${state.userId}`
    : `Signed in as user ${state.userId}`;
}

async function signIn(token) {
  const user = subjectOf(token);
  if (!user) { showError("That is not a token this API issues (no user id in it)."); return; }
  state.token = token; state.userId = user;
  sessionStorage.setItem("feed-token", token);
  try {
    const prefs = await api("/v1/me/preferences");
    state.order = prefs.feed_order;
  } catch (e) { failed(e); if (!state.token) return; }
  document.querySelector(`input[name=order][value=${state.order}]`).checked = true;
  showWhoami(null);
  $("nav-me").href = `#/users/${user}`;
  $("nav").hidden = false;
  showError("");
  api(`/v1/users/${user}`).then(showWhoami, () => {});  // the names, when set: not needed to go on
  const profile = profileRoute();
  showView(Boolean(profile));
  if (profile) openProfile(profile);
  await loadFirst();
  if (state.token) keepStreaming();
}

function signOut(clearMessage = true) {
  state.token = null; state.userId = null;
  if (state.stream) state.stream.abort();
  state.stream = null;
  sessionStorage.removeItem("feed-token");
  $("whoami").textContent = "Not signed in";
  $("compose").hidden = true;
  $("feed-section").hidden = true;
  $("profile-section").hidden = true;
  $("nav").hidden = true;
  state.profile = null; state.profileSeq += 1; state.feedStale = false;
  if (clearMessage) showError("");
  $("mint-user").focus();
}

function wire() {
  $("mint-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const minted = await api("/dev/token", { method: "POST", body: { user_id: $("mint-user").value } });
      await signIn(minted.token);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) showError("This API mints no tokens (not in development mode): paste one.");
      else failed(e);
    }
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token-input").value.trim());
  });
  $("post-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("post-text").value;
    try {
      await api("/v1/posts", { method: "POST", body: { text }, headers: { "Idempotency-Key": crypto.randomUUID() } });
      $("post-text").value = "";
      say("Posted. Your followers will see it in a moment.");
    } catch (e) { failed(e); }
  });
  $("follow-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = $("follow-user").value;
    try {
      await api(`/v1/users/${id}/follow`, { method: "PUT" });
      say(`Following user ${id}: their new posts will appear here.`);
      $("follow-user").value = "";
    } catch (e) { failed(e); }
  });
  document.querySelectorAll("input[name=order]").forEach((radio) => radio.addEventListener("change", () => {
    state.order = radio.value;
    loadFirst();
  }));
  $("save-order").addEventListener("click", async () => {
    try {
      await api("/v1/me/preferences", { method: "PUT", body: { feed_order: state.order } });
      say(`Your feed now opens in ${state.order} order.`);
    } catch (e) { failed(e); }
  });
  $("new-posts").addEventListener("click", async () => { await loadFirst(); $("feed").focus(); });
  $("more").addEventListener("click", loadMore);
  $("timeline-more").addEventListener("click", timelineMore);
  $("profile-follow").addEventListener("click", () => toggle("follow"));
  $("profile-mute").addEventListener("click", () => toggle("mute"));
  $("profile-form").addEventListener("submit", saveProfile);
  window.addEventListener("hashchange", route);
  state.sentinel = new IntersectionObserver((entries) => {
    if (entries.some((entry) => entry.isIntersecting)) loadMore();
  });
  state.sentinel.observe($("sentinel"));
  const saved = sessionStorage.getItem("feed-token");
  if (saved) signIn(saved);
}

document.addEventListener("DOMContentLoaded", wire);
