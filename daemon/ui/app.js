/* shoal's status page (docs/ui.md): plain JavaScript, no build step.

   How it stays live without polling: it lists the members, the controller
   and the keys once (each listing carries the change `index` and the agent's
   `run`), then follows GET /v1/watch?index=&run= (newline-delimited JSON,
   read with fetch() so that the Authorization header can be sent). A dropped
   stream resumes from the last index it saw; a 410 (the agent restarted, or
   the index is no longer kept) re-lists. Only the counters of /v1/self are
   fetched again, every COUNTERS_MS, and the members' parts in the election
   (`voter`, `former_node_id`: back with a new data directory) after a change
   of the voters or a voter joining (refreshVoters).

   The token: any 401 shows the token prompt and clears what was shown. The
   token is kept in sessionStorage only. */
"use strict";

(function () {
  const TOKEN_KEY = "shoal-api-token";
  const COUNTERS_MS = 5000;
  const FEED_MAX = 300;         // events kept in the feed
  const BACKFILL = 200;         // changes before the listing replayed into the feed
  const QUIET_MS = 15000;       // no line (not even a ping, every 5 s): reconnect
  const RETRY_MS = [500, 1000, 2000, 4000, 5000];
  const KEY_PAGE = 1000;        // keys per listing request
  const KEY_MAX = 20000;        // keys shown at most
  const VOTERS_MS = 300;        // members' voter roles asked again at most this often
  const STATUS_LABEL = { alive: "alive", suspect: "suspect", dead: "failed", left: "left" };
  const HEALTH_TAG = "shoal:health";

  const $ = (id) => document.getElementById(id);

  class AuthError extends Error {}
  class GoneError extends Error {}

  const state = {
    generation: 0,        // bumped on every (re)start: stale loops stop
    run: null,
    listIndex: { members: 0, controller: 0, kv: 0 },
    lastIndex: 0,
    self: null,
    members: new Map(),
    controller: null,
    keys: new Map(),
    keysTruncated: false,
    feed: [],
    page: 0,
    openPaths: new Set(),
    abort: null,
    retries: 0,
    counterTimer: null,
    tenureTimer: null,
    dirty: new Set(),
    renderTimer: null,
    votersTimer: null,
  };

  // -- the API -----------------------------------------------------------------

  function headers() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: "Bearer " + token } : {};
  }

  async function api(path) {
    const response = await fetch(path, { headers: headers(), cache: "no-store" });
    if (response.status === 401) throw new AuthError("401");
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).error || detail; } catch (e) { /* not JSON */ }
      throw new Error(path + ": " + response.status + " " + detail);
    }
    return response.json();
  }

  // -- start, list, watch --------------------------------------------------------

  async function start() {
    const gen = ++state.generation;
    stopLoops();
    try {
      const self = await api("/v1/self");   // first: a 401 here costs one request
      if (gen !== state.generation) return;
      state.self = self;
      await list(gen);
      if (gen !== state.generation) return;
      showMain();
      watch(gen, true);
      state.counterTimer = setInterval(refreshCounters, COUNTERS_MS);
      state.tenureTimer = setInterval(() => mark("controller"), 1000);
      refreshChecks();
    } catch (err) {
      if (gen !== state.generation) return;
      if (err instanceof AuthError) return askToken();
      showError("Cannot read this agent's API: " + err.message + " (retrying)");
      setTimeout(() => { if (gen === state.generation) start(); }, 3000);
    }
  }

  function stopLoops() {
    if (state.abort) state.abort.abort();
    state.abort = null;
    clearInterval(state.counterTimer);
    clearInterval(state.tenureTimer);
  }

  async function list(gen) {
    const members = await api("/v1/members");
    const controller = await api("/v1/controller");
    const keys = [];
    let after = "";
    let kvAt = null;
    for (;;) {
      const page = await api("/v1/kv/?prefix=&limit=" + KEY_PAGE +
                             (after ? "&after=" + encodeURIComponent(after) : ""));
      if (kvAt === null) kvAt = page;
      keys.push(...page.items);
      if (!page.next_after || keys.length >= KEY_MAX) {
        state.keysTruncated = Boolean(page.next_after);
        break;
      }
      after = page.next_after;
    }
    if (gen !== state.generation) return;
    if (members.run !== controller.run || members.run !== kvAt.run) {
      throw new Error("the agent restarted while the page listed");
    }
    state.run = members.run;
    state.listIndex = { members: members.index, controller: controller.index, kv: kvAt.index };
    state.lastIndex = Math.min(members.index, controller.index, kvAt.index);
    state.members = new Map();
    for (const m of members.members) {
      state.members.set(m.name, {
        name: m.name, status: m.status, address: m.address, tags: m.tags || {},
        health: m.health || "passing", incarnation: m.incarnation, changedMs: null,
        versions: m.versions || null, voter: m.voter || null,
        formerId: m.former_node_id || null,
      });
    }
    state.controller = {
      name: controller.controller, epoch: controller.epoch,
      sinceMs: controller.since_wall_ms, voters: controller.voters || [],
    };
    state.keys = new Map(keys.map((k) => [k.key, k]));
    state.feed = [];
    mark("members", "controller", "kv", "feed", "counters", "banners");
  }

  async function watch(gen, first) {
    const controller = new AbortController();
    state.abort = controller;
    let from = state.lastIndex;
    if (first) from = Math.max(0, from - BACKFILL);   // a little history for the feed
    const url = "/v1/watch?index=" + from + "&run=" + encodeURIComponent(state.run);
    let response;
    try {
      response = await fetch(url, { headers: headers(), signal: controller.signal,
                                    cache: "no-store" });
    } catch (err) {
      return dropped(gen, "cannot reach the agent");
    }
    if (gen !== state.generation) return;
    if (response.status === 401) return askToken();
    if (response.status === 410 || response.status === 400) {
      if (first && from < state.lastIndex) return watch(gen, false);  // history not kept
      state.stream = "re-listing: " + (response.status === 410 ? "the agent restarted or "
        + "the stream fell too far behind" : "the index is ahead of the agent");
      mark("banners");
      return start();
    }
    if (!response.ok || !response.body) return dropped(gen, "HTTP " + response.status);
    state.retries = 0;
    setStream("live", false);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let quiet = setTimeout(() => controller.abort(), QUIET_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        clearTimeout(quiet);
        quiet = setTimeout(() => controller.abort(), QUIET_MS);
        buffer += decoder.decode(value, { stream: true });
        let newline;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          if (line.trim()) apply(JSON.parse(line));
        }
      }
    } catch (err) {
      /* aborted or the connection broke: resume below */
    } finally {
      clearTimeout(quiet);
    }
    if (gen !== state.generation) return;
    dropped(gen, "the connection ended");
  }

  function dropped(gen, why) {
    if (gen !== state.generation) return;
    const wait = RETRY_MS[Math.min(state.retries, RETRY_MS.length - 1)];
    state.retries += 1;
    setStream("dropped, resuming from index " + state.lastIndex + " (" + why + ")", true);
    setTimeout(() => { if (gen === state.generation) watch(gen, false); }, wait);
  }

  // -- changes -----------------------------------------------------------------------

  function apply(change) {
    if (change.type === "hello") {
      if (change.run !== state.run) start();
      return;
    }
    if (change.type === "ping" || typeof change.index !== "number") return;
    if (change.index > state.lastIndex) state.lastIndex = change.index;
    if (change.index <= state.listIndex[change.topic]) {  // already in the listing
      backfill(change);
      return;
    }
    if (change.topic === "members") applyMember(change);
    else if (change.topic === "controller") applyController(change);
    else if (change.topic === "kv") applyKey(change);
    addToFeed(change);
  }

  function backfill(change) {
    // Before the listing: the feed shows it, and a member's last change gets its time.
    if (change.topic === "members" && change.name && change.type !== "member-reaped") {
      const row = state.members.get(change.name);
      if (row) { row.changedMs = change.at_ms; mark("members"); }
    }
    addToFeed(change);
  }

  function applyMember(ev) {
    const name = ev.name;
    if (!name) return;
    if (ev.type === "member-reaped") {
      state.members.delete(name);
    } else if (ev.type === "member-health-changed") {
      const row = state.members.get(name);
      if (row) { row.health = ev.health; row.changedMs = ev.at_ms; }
      if (state.self && name === state.self.name) refreshChecks();
    } else if (ev.status) {
      const row = state.members.get(name) || { name: name, changedMs: null };
      row.status = ev.status;
      if (ev.address) row.address = ev.address;
      if (ev.tags) { row.tags = ev.tags; row.health = ev.tags[HEALTH_TAG] || "passing"; }
      if (typeof ev.incarnation === "number") row.incarnation = ev.incarnation;
      if (ev.versions) row.versions = ev.versions;
      row.changedMs = ev.at_ms;
      state.members.set(name, row);
      // A voter back (a new data directory, maybe); other joins cannot move
      // the Voter column, and a large cluster has many.
      if (ev.type === "member-joined" && state.controller &&
          state.controller.voters.includes(name)) refreshVoters();
      if (state.self && name === state.self.name) state.self.status = ev.status;
    }
    mark("members", "banners");
  }

  function applyController(ev) {
    const c = state.controller;
    if (ev.type === "controller-changed") {
      c.name = ev.controller;
      if (typeof ev.epoch === "number") c.epoch = ev.epoch;
      c.sinceMs = ev.controller ? ev.at_ms : null;
    } else if (ev.type === "voters-changed") {
      c.voters = ev.voters || [];
      refreshVoters();
    } else if (ev.type === "voter-replaced") {
      refreshVoters();
    } else if (typeof ev.epoch === "number" && ev.epoch > (c.epoch || 0)) {
      c.epoch = ev.epoch;
    }
    mark("controller");
  }

  function applyKey(ev) {
    if (ev.type === "put") state.keys.set(ev.key, ev);
    else if (ev.type === "delete") state.keys.delete(ev.key);
    mark("kv");
  }

  function addToFeed(ev) {
    state.feed.push(ev);
    if (state.feed.length > FEED_MAX * 2) state.feed.splice(0, state.feed.length - FEED_MAX);
    mark("feed");
  }

  async function refreshCounters() {
    const gen = state.generation;
    try {
      const self = await api("/v1/self");
      if (gen !== state.generation) return;
      state.self = self;
      mark("counters", "banners");
    } catch (err) {
      if (err instanceof AuthError && gen === state.generation) askToken();
    }
  }

  // Each member's part in the election is the agent's to work out (it
  // remembers the ids the voter configurations named): asked again, at most
  // every VOTERS_MS, after a change that can move it.
  function refreshVoters() {
    if (state.votersTimer) return;
    const gen = state.generation;
    state.votersTimer = setTimeout(async () => {
      state.votersTimer = null;
      try {
        const listing = await api("/v1/members");
        if (gen !== state.generation) return;
        for (const m of listing.members) {
          const row = state.members.get(m.name);
          if (row) { row.voter = m.voter || null; row.formerId = m.former_node_id || null; }
        }
        mark("members");
      } catch (err) {
        if (err instanceof AuthError && gen === state.generation) askToken();
      }
    }, VOTERS_MS);
  }

  async function refreshChecks() {
    const gen = state.generation;
    try {
      const checks = await api("/v1/checks");
      if (gen === state.generation) { state.checks = checks; mark("checks"); }
    } catch (err) {
      if (err instanceof AuthError && gen === state.generation) askToken();
    }
  }

  // -- the token --------------------------------------------------------------------

  function askToken() {
    state.generation += 1;
    stopLoops();
    const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
    sessionStorage.removeItem(TOKEN_KEY);
    clearData();
    $("main").hidden = true;
    $("auth").hidden = false;
    $("auth-error").textContent = hadToken ? "The agent refused that token." : "";
    setStream("waiting for the token", false);
    $("auth-token").focus();
  }

  function clearData() {
    state.members = new Map();
    state.keys = new Map();
    state.feed = [];
    state.controller = null;
    state.self = null;
    state.checks = null;
    for (const id of ["member-rows", "feed-list", "kv-tree", "counter-rows", "check-rows"]) {
      $(id).replaceChildren();
    }
    for (const id of ["where", "member-counts", "kv-count", "checks-health", "page-info"]) {
      $(id).textContent = "";
    }
    for (const id of ["banner-alone", "banner-single", "banner-left", "banner-stream", "banner-error"]) {
      $(id).hidden = true;
    }
  }

  function showMain() {
    $("auth").hidden = true;
    $("main").hidden = false;
    $("banner-error").hidden = true;
  }

  function showError(text) {
    $("banner-error").textContent = text;
    $("banner-error").hidden = false;
  }

  function setStream(text, droppedNow) {
    state.streamDropped = droppedNow;
    state.stream = text;
    mark("banners");
  }

  // -- rendering (coalesced: many changes, one render) ------------------------------

  function mark(...parts) {
    for (const p of parts) state.dirty.add(p);
    if (state.renderTimer === null) state.renderTimer = setTimeout(render, 30);
  }

  function render() {
    state.renderTimer = null;
    const dirty = state.dirty;
    state.dirty = new Set();
    if ($("main").hidden && !dirty.has("banners")) return;
    if (dirty.has("members")) renderMembers();
    if (dirty.has("controller")) renderController();
    if (dirty.has("feed")) renderFeed();
    if (dirty.has("kv")) renderKeys();
    if (dirty.has("counters")) renderCounters();
    if (dirty.has("checks")) renderChecks();
    if (dirty.has("banners") || dirty.has("members")) renderBanners();
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "text") node.textContent = v;
        else node.setAttribute(k, v === true ? "" : v);
      }
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function clock(ms) {
    if (!ms) return "";
    const d = new Date(ms);
    return d.toLocaleTimeString([], { hour12: false }) + "." +
      String(d.getMilliseconds()).padStart(3, "0");
  }

  function duration(ms) {
    let s = Math.max(0, Math.floor(ms / 1000));
    const parts = [];
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (s >= size) { parts.push(Math.floor(s / size) + unit); s %= size; }
    }
    parts.push(s + "s");
    return parts.slice(0, 2).join(" ");
  }

  // What a member understands (docs/operations.md, "An upgrade"): its
// membership range and feature level in the cell, every range in the title.
function versionsText(v) {
  if (!v) return "?";
  return "mem " + v.membership[0] + "-" + v.membership[1] + " · feat " + v.features;
}

function versionsTitle(v) {
  if (!v) return "an agent older than versions on the wire";
  return ["envelope", "membership", "election", "sync"]
    .map((p) => p + " " + v[p][0] + "-" + v[p][1]).join(", ") + ", features " + v.features;
}

// A member's part in the election, and whether it came back with a new data
// directory (the id it voted under before, in short; whole in the title).
function voterText(m) {
  const role = m.voter === "non-voter" ? "" : (m.voter || "");
  if (!m.formerId) return role === "replaced" ? "replaced (new data directory)" : role;
  return (m.voter || "non-voter") + " · new data directory (was " + m.formerId.slice(0, 8) + ")";
}

function voterTitle(m) {
  if (!m.formerId) return m.voter === "replaced"
    ? "came back with a new data directory: its old identity leaves the voter set" : null;
  return "came back with a new data directory; it voted as " + m.formerId +
    " before. Its old identity leaves the voter set; it rejoins as a non-voter, " +
    "a voter again once it has caught up.";
}

function tagText(tags) {
    return Object.entries(tags || {}).filter(([k]) => k !== HEALTH_TAG)
      .map(([k, v]) => (v ? k + "=" + v : k)).join(" ");
  }

  function filteredMembers() {
    const status = $("f-status").value;
    const tag = $("f-tag").value.trim();
    const name = $("f-name").value.trim().toLowerCase();
    let tagKey = null;
    let tagValue = null;
    if (tag) {
      const eq = tag.indexOf("=");
      tagKey = eq >= 0 ? tag.slice(0, eq) : tag;
      tagValue = eq >= 0 ? tag.slice(eq + 1) : null;
    }
    const rows = [];
    for (const m of state.members.values()) {
      if (status && STATUS_LABEL[m.status] !== status) continue;
      if (name && !m.name.toLowerCase().includes(name)) continue;
      if (tagKey !== null) {
        const tags = m.tags || {};
        if (!(tagKey in tags)) continue;
        if (tagValue !== null && tags[tagKey] !== tagValue) continue;
      }
      rows.push(m);
    }
    rows.sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }));
    return rows;
  }

  function renderMembers() {
    const counts = { alive: 0, suspect: 0, dead: 0, left: 0 };
    for (const m of state.members.values()) counts[m.status] = (counts[m.status] || 0) + 1;
    $("member-counts").textContent = "(" + state.members.size + ": " +
      Object.entries(counts).filter(([, n]) => n).map(([s, n]) => n + " " + STATUS_LABEL[s])
        .join(", ") + ")";
    const rows = filteredMembers();
    const size = Number($("page-size").value);
    const pages = Math.max(1, Math.ceil(rows.length / size));
    state.page = Math.min(state.page, pages - 1);
    const first = state.page * size;
    const shown = rows.slice(first, first + size);
    const me = state.self ? state.self.name : null;
    $("member-rows").replaceChildren(...shown.map((m) => {
      const label = STATUS_LABEL[m.status] || m.status;
      return el("tr", { "data-name": m.name, "data-status": label },
        el("th", { scope: "row", text: m.name + (m.name === me ? " (this agent)" : "") }),
        el("td", null, el("span", { class: "status s-" + label, text: label })),
        el("td", { class: "mono", text: m.address || "" }),
        el("td", { class: "mono", text: tagText(m.tags) }),
        el("td", null, el("span", { class: "health h-" + m.health, text: m.health })),
        el("td", { class: "num", text: String(m.incarnation ?? "") }),
        el("td", { class: "mono", title: versionsTitle(m.versions), text: versionsText(m.versions) }),
        el("td", { class: m.formerId || m.voter === "replaced" ? "voter wiped" : "voter",
                   "data-voter": m.voter || "", "data-former": m.formerId || null,
                   title: voterTitle(m), text: voterText(m) }),
        el("td", { class: "mono", title: m.changedMs ? new Date(m.changedMs).toISOString()
          : "no change since this page loaded", text: m.changedMs ? clock(m.changedMs) : "—" }));
    }));
    $("page-info").textContent = rows.length
      ? "rows " + (first + 1) + "–" + (first + shown.length) + " of " + rows.length
      : "no member matches";
    $("page-prev").disabled = state.page === 0;
    $("page-next").disabled = state.page >= pages - 1;
  }

  function renderController() {
    const c = state.controller;
    if (!c) return;
    $("ctl-name").textContent = c.name || "none (election under way)";
    $("ctl-epoch").textContent = String(c.epoch ?? "—");
    $("ctl-tenure").textContent = c.name && c.sinceMs
      ? duration(Date.now() - c.sinceMs) + " (since " + clock(c.sinceMs) + ")" : "—";
    $("ctl-voters").textContent = c.voters.length ? c.voters.join(", ") : "—";
  }

  function describe(ev) {
    const who = ev.name || "";
    switch (ev.type) {
      case "member-joined": return who + " joined (" + ev.address + ")";
      case "member-suspected":
        return who + " suspected" + (ev.source ? " by " + ev.source : "") +
          " (incarnation " + ev.incarnation + ")";
      case "member-refuted":
        return who + " refuted a suspicion: alive (incarnation " + ev.incarnation + ")";
      case "member-failed":
        return who + " failed" + (ev.source ? " (declared by " + ev.source + ")" : "");
      case "member-left": return who + " left";
      case "member-updated": return who + " updated (" + (tagText(ev.tags) || "no tags") + ")";
      case "member-reaped": return who + " removed from the list";
      case "member-health-changed": return who + " health " + ev.previous + " → " + ev.health;
      case "name-conflict": return "name conflict: " + who + " claimed from " + ev.address;
      case "controller-changed":
        return ev.controller ? "controller is " + ev.controller + " (epoch " + ev.epoch + ")"
          : "no controller (epoch " + ev.epoch + ")";
      case "controller-elected": return "this agent became controller (epoch " + ev.epoch + ")";
      case "controller-lost":
        return "this agent stopped being controller (epoch " + ev.epoch + ", " + ev.reason + ")";
      case "voters-changed": return "voters: " + (ev.voters || []).join(", ");
      case "voter-replaced":
        return ev.node + " " + ev.reason + " (id " + String(ev.old_id).slice(0, 8) + " → " +
          String(ev.new_id).slice(0, 8) + "): " + ev.action;
      case "put": return "key " + ev.key + " put by " + ev.writer + " (" + ev.reason + ")";
      case "delete": return "key " + ev.key + " deleted (" + ev.reason + ")";
      default: return ev.type + " " + who;
    }
  }

  function renderFeed() {
    const withKeys = $("feed-kv").checked;
    const items = [];
    for (let i = state.feed.length - 1; i >= 0 && items.length < FEED_MAX; i--) {
      const ev = state.feed[i];
      if (ev.topic === "kv" && !withKeys) continue;
      const at = ev.at_ms || ev.modified_wall_ms;
      items.push(el("li", { class: "ev-" + ev.type, "data-type": ev.type },
        el("time", { datetime: at ? new Date(at).toISOString() : null, text: clock(at) }),
        el("span", { class: "tag", text: ev.type }),
        el("span", { text: describe(ev) })));
    }
    if (!items.length) items.push(el("li", { class: "muted", text: "no events yet" }));
    $("feed-list").replaceChildren(...items);
  }

  function renderKeys() {
    $("kv-count").textContent = "(" + state.keys.size +
      (state.keysTruncated ? "+, the first " + KEY_MAX + " listed" : "") + ")";
    const root = new Map();
    for (const key of [...state.keys.keys()].sort()) {
      const parts = key.split("/");
      let level = root;
      for (let i = 0; i < parts.length - 1; i++) {
        const name = parts[i] + "/";
        if (!level.has(name)) level.set(name, new Map());
        const next = level.get(name);
        if (!(next instanceof Map)) break;
        level = next;
      }
      const leaf = parts[parts.length - 1];
      if (!level.has(leaf)) level.set(leaf, state.keys.get(key));
    }
    const openAll = state.keys.size <= 200;
    const tree = $("kv-tree");
    tree.replaceChildren(state.keys.size ? renderLevel(root, "", openAll)
      : el("p", { class: "muted", text: "no keys" }));
  }

  function renderLevel(level, path, openAll) {
    const list = el("ul", { role: path ? "group" : "tree" });
    for (const [name, node] of level) {
      if (node instanceof Map) {
        const full = path + name;
        const details = el("details", { open: openAll || state.openPaths.has(full) },
          el("summary", { text: name + " (" + countKeys(node) + ")" }),
          renderLevel(node, full, openAll));
        details.addEventListener("toggle", () => {
          if (details.open) state.openPaths.add(full); else state.openPaths.delete(full);
        });
        list.append(el("li", null, details));
      } else {
        let value = node.value;
        if (value === null || value === undefined) {
          value = "(binary, " + atob(node.value_base64 || "").length + " bytes)";
        } else if (value.length > 300) {
          value = value.slice(0, 300) + "…";
        }
        list.append(el("li", { class: "leaf", "data-key": node.key,
                               title: "written by " + node.writer + " at " +
                                 new Date(node.modified_wall_ms).toISOString() +
                                 (node.ephemeral ? ", ephemeral (owner " + node.owner + ")" : "") },
          el("span", { class: "key", text: name }),
          el("span", { class: "value mono", text: value })));
      }
    }
    return list;
  }

  function countKeys(level) {
    let n = 0;
    for (const node of level.values()) n += node instanceof Map ? countKeys(node) : 1;
    return n;
  }

  function renderCounters() {
    const self = state.self;
    if (!self) return;
    $("where").textContent = "· " + self.name + " in " + self.cluster;
    document.title = "shoal · " + self.name;
    const rows = Object.entries(self.counters || {})
      .filter(([k]) => /^(sync|store|history)_/.test(k))
      .map(([k, v]) => el("div", null, el("dt", { class: "mono", text: k }),
                          el("dd", { class: "num", text: String(v) })));
    $("counter-rows").replaceChildren(...rows);
  }

  function renderChecks() {
    const c = state.checks;
    if (!c) return;
    $("checks-health").textContent = "(" + c.health + ")";
    const rows = (c.checks || []).map((k) => el("tr", null,
      el("th", { scope: "row", text: k.id }), el("td", { text: k.kind }),
      el("td", null, el("span", { class: "health h-" + k.status, text: k.status })),
      el("td", { class: "mono", text: (k.output || "").slice(0, 200) })));
    if (!rows.length) rows.push(el("tr", null, el("td", { colspan: 4, class: "muted",
                                                       text: "no checks configured" })));
    $("check-rows").replaceChildren(...rows);
  }

  function renderBanners() {
    $("stream-state").textContent = state.stream ? "stream: " + state.stream : "";
    $("banner-stream").hidden = !state.streamDropped;
    $("banner-stream-detail").textContent = state.streamDropped ? "(" + state.stream + ")" : "";
    const self = state.self;
    if (!self || $("main").hidden) return;
    const mine = state.members.get(self.name);
    const left = (mine ? mine.status : self.status) === "left";
    $("banner-left").hidden = !left;
    let others = 0;
    for (const m of state.members.values()) {
      if (m.name !== self.name && (m.status === "alive" || m.status === "suspect")) others++;
    }
    // Alone by configuration (a --dev agent) is not a fault: say so calmly.
    $("banner-alone").hidden = left || others > 0 || self.single_node === true;
    $("banner-single").hidden = left || others > 0 || self.single_node !== true;
  }

  // -- controls --------------------------------------------------------------------

  function wire() {
    $("auth-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const token = $("auth-token").value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("auth-token").value = "";
      $("auth-error").textContent = "";
      start();
    });
    const refilter = () => { state.page = 0; mark("members"); };
    $("member-filters").addEventListener("submit", (e) => e.preventDefault());
    for (const id of ["f-status", "f-tag", "f-name", "page-size"]) {
      $(id).addEventListener("input", refilter);
    }
    $("page-prev").addEventListener("click", () => { state.page -= 1; mark("members"); });
    $("page-next").addEventListener("click", () => { state.page += 1; mark("members"); });
    $("feed-kv").addEventListener("change", () => mark("feed"));
  }

  wire();
  start();
})();
