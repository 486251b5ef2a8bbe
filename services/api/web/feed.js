// The feed page: the public API (/v1/...) with a bearer token, nothing else. No build step.
"use strict";

const PAGE = 20;
const $ = (id) => document.getElementById(id);
const state = {
  token: null, userId: null, order: "ranked", cursor: null, version: null,
  shown: new Set(), loading: false, fresh: 0, stream: null, lastEventId: null, retryTimer: null,
};

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

// The author as a reader knows them: their display name and handle when they set them
// (author_display_name, author_handle), their id otherwise.
function authorName(item) {
  const handle = item.author_handle ? `@${item.author_handle}` : "";
  if (item.author_display_name) {
    return handle ? `${item.author_display_name} (${handle})` : item.author_display_name;
  }
  return handle || `User ${item.author_id}`;
}

function render(item) {
  const li = document.createElement("li");
  li.dataset.postId = item.post_id;
  const meta = document.createElement("div");
  meta.className = "meta";
  const likes = typeof item.like_count === "number" ? ` · ${item.like_count} likes` : "";
  const who = authorName(item);
  meta.textContent = `${who} · ${age(item.created_at)}${likes}`;
  const text = document.createElement("p");
  text.className = "text";
  text.textContent = item.text;
  const actions = document.createElement("div");
  actions.className = "actions";
  const like = button(item.liked ? "Liked" : "Like", async () => {
    const liked = like.getAttribute("aria-pressed") === "true";
    try {
      await api(`/v1/posts/${item.post_id}/like`, { method: liked ? "DELETE" : "PUT" });
      like.setAttribute("aria-pressed", String(!liked));
      like.textContent = liked ? "Like" : "Liked";
    } catch (e) { failed(e); }
  }, { "aria-pressed": String(item.liked === true) });
  actions.append(like);
  if (item.author_id !== state.userId) {
    actions.append(button(`Unfollow ${who}`, async () => {
      try {
        await api(`/v1/users/${item.author_id}/follow`, { method: "DELETE" });
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
  } catch (e) { failed(e, loadFirst); } finally { state.loading = false; }
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
  } finally { state.loading = false; }
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
  $("whoami").textContent = `Signed in as user ${user}`;
  $("compose").hidden = false;
  $("feed-section").hidden = false;
  showError("");
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
  new IntersectionObserver((entries) => {
    if (entries.some((entry) => entry.isIntersecting)) loadMore();
  }).observe($("sentinel"));
  const saved = sessionStorage.getItem("feed-token");
  if (saved) signIn(saved);
}

document.addEventListener("DOMContentLoaded", wire);
