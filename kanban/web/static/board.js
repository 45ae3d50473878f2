// The live board: Server-Sent Events update the columns, cards open in a drawer, actions
// post without a reload. Everything from the server is set with textContent (or parsed
// from server-escaped HTML); nothing a card says is ever treated as markup.
"use strict";

(() => {
  const body = document.body;
  const csrf = body.dataset.csrf;
  const FINISHED = new Set(["done", "failed", "cancelled"]);
  const AGE_REFRESH_MS = 5000;
  // Controls and bidi overrides spelled out (\u202e), as the server's templates do.
  const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
  const shown = (text) => String(text).replace(UNSAFE, (c) =>
    "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

  // --- ages ------------------------------------------------------------------------------
  function age(iso, now) {
    if (!iso) return "-";
    const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (seconds >= size) return Math.floor(seconds / size) + unit;
    }
    return seconds + "s";
  }
  function refreshAges(root) {
    const now = Date.now();
    for (const t of (root || document).querySelectorAll("time.age, time.hb")) {
      if (t.dateTime) t.textContent = age(t.dateTime, now);
    }
  }
  setInterval(refreshAges, AGE_REFRESH_MS);

  // --- flash messages --------------------------------------------------------------------
  const flash = document.getElementById("flash");
  function say(text, isError) {
    if (!flash) { if (isError) alert(text); return; }
    flash.textContent = text;
    flash.classList.toggle("error", Boolean(isError));
    flash.hidden = false;
    clearTimeout(say.timer);
    say.timer = setTimeout(() => { flash.hidden = true; }, isError ? 8000 : 3000);
  }

  // --- actions: every form.action posts with the CSRF token and stays on the page ---------
  async function post(form) {
    const data = new URLSearchParams(new FormData(form));
    const response = await fetch(form.action, {
      method: "POST",
      headers: { "X-CSRF-Token": csrf, "Accept": "application/json" },
      body: data,
      credentials: "same-origin",
    });
    let payload = {};
    try { payload = await response.json(); } catch (e) { payload = {}; }
    if (!response.ok) throw new Error(payload.error || ("HTTP " + response.status));
    return payload;
  }
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.classList || !form.classList.contains("action")) return;
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      const result = await post(form);
      form.reset();
      if (body.dataset.page === "card" || body.dataset.page === "inbox") {
        location.reload(); return;
      }
      say(form.id === "add-card" && result.id ? "added #" + result.id : "done");
      if (drawer.openId && drawer.contains(form)) loadDrawer(drawer.openId);
    } catch (error) {
      say(error.message, true);
    } finally {
      if (button) button.disabled = false;
    }
  });

  // --- the drawer ------------------------------------------------------------------------
  const drawer = document.getElementById("drawer") || { hidden: true };
  const drawerBody = drawer.querySelector ? drawer.querySelector(".drawer-body") : null;
  drawer.openId = null;

  // What someone has typed into the drawer's forms, by form and field, and where the caret is.
  const fieldKey = (f) => (f.form ? f.form.getAttribute("action") : "") + " " + f.name;
  function typed() {
    const values = new Map();
    for (const f of drawerBody.querySelectorAll("input[name], textarea[name]")) {
      if (f.type !== "hidden" && f.value !== f.defaultValue) values.set(fieldKey(f), f.value);
    }
    const active = document.activeElement;
    const focus = active && active.name && drawerBody.contains(active) ? fieldKey(active) : null;
    return { values, focus };
  }
  function retype(kept) {
    for (const f of drawerBody.querySelectorAll("input[name], textarea[name]")) {
      const key = fieldKey(f);
      if (kept.values.has(key)) f.value = kept.values.get(key);
      if (key === kept.focus) f.focus();
    }
  }

  async function loadDrawer(id) {
    if (!drawerBody) { location.href = "/cards/" + id; return; }
    const response = await fetch("/cards/" + encodeURIComponent(id) + "?partial=1",
      { credentials: "same-origin", headers: { "Accept": "text/html" } });
    if (!response.ok) { say("#" + id + ": HTTP " + response.status, true); return; }
    // Server-rendered and escaped by the template engine; parsed inert, then adopted.
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const keepOpen = new Set([...drawerBody.querySelectorAll("details[open]")]
      .map((d) => d.dataset.key).filter(Boolean));
    // A refresh of the card already open keeps what was typed while it was on its way.
    const kept = drawer.openId === String(id) ? typed() : null;
    drawerBody.replaceChildren(...[...doc.body.childNodes].map((n) => document.adoptNode(n)));
    drawerBody.querySelectorAll("details").forEach((d, i) => {
      d.dataset.key = String(i);
      if (keepOpen.has(String(i))) d.open = true;
    });
    if (kept) retype(kept);
    drawer.openId = String(id);
    drawer.hidden = false;
    drawer.stale = false;
  }
  function closeDrawer() {
    drawer.hidden = true;
    drawer.openId = null;
    if (drawerBody) drawerBody.replaceChildren();
  }
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a.open, a.card-link");
    if (!link || !drawerBody || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const item = link.closest("[data-id]");
    const id = link.dataset.id || (item && item.dataset.id);
    if (!id) return;
    event.preventDefault();
    loadDrawer(id);
  });
  const closeButton = document.getElementById("drawer-close");
  if (closeButton) closeButton.addEventListener("click", closeDrawer);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeDrawer(); });

  function drawerBusy() {
    // someone typing in the drawer: do not pull the form from under them
    return drawerBody !== null && typed().values.size > 0;
  }
  // a change that came while someone typed is shown once the fields are cleared
  document.addEventListener("input", () => {
    if (drawer.stale && drawer.openId && !drawerBusy()) loadDrawer(drawer.openId);
  });

  // --- the board -------------------------------------------------------------------------
  if (body.dataset.page !== "board") { refreshAges(); return; }
  const board = body.dataset.board;
  const filter = {
    profile: body.dataset.filterProfile || "",
    text: (body.dataset.filterText || "").toLowerCase(),
  };
  const template = document.getElementById("card-template");
  const columns = {};
  for (const section of document.querySelectorAll("section.column")) {
    columns[section.dataset.status] = section;
  }

  function matches(card) {
    if (filter.profile && card.profile !== filter.profile) return false;
    if (!filter.text) return true;
    const number = filter.text.replace(/^#/, "");
    return card.title.toLowerCase().includes(filter.text) || String(card.id) === number;
  }
  function sortKey(status, priority, id, updated, due) {
    if (status === "scheduled") return [Date.parse(due), id];  // the next due first
    return FINISHED.has(status) ? [-Date.parse(updated), -id] : [-priority, id];
  }
  function before(a, b) { return a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]); }
  function keyOf(li, status) {
    return sortKey(status, Number(li.dataset.priority), Number(li.dataset.id),
      li.dataset.updated, li.dataset.due);
  }

  function render(card) {
    const li = template.content.firstElementChild.cloneNode(true);
    li.id = "card-" + card.id;
    li.className = "card st-" + card.status;
    li.dataset.id = card.id;
    li.dataset.priority = card.priority;
    li.dataset.updated = card.updated_at;
    li.dataset.profile = card.profile;
    li.dataset.title = card.title;
    li.dataset.due = card.due_at || "";
    const waits = li.querySelector(".waits");
    waits.hidden = !(card.awaiting_approval || []).length;
    waits.title = (card.awaiting_approval || []).join("; ");
    li.querySelector(".due").textContent = card.due_at
      ? "due " + card.due_at.slice(0, 16).replace("T", " ") + " UTC" : "";
    li.querySelector("a.open").href = "/cards/" + card.id;
    li.querySelector(".cid").textContent = "#" + card.id;
    const pri = li.querySelector(".pri");
    pri.textContent = "p" + card.priority;
    pri.hidden = !card.priority;
    li.querySelector(".profile").textContent = card.profile;
    const since = FINISHED.has(card.status) ? card.updated_at : card.created_at;
    li.querySelector("time.age").dateTime = since;
    const cron = li.querySelector(".cron");
    if (cron) cron.remove();
    if (card.created_by.startsWith("cron:")) {
      const span = document.createElement("span");
      span.className = "cron";
      span.textContent = "⏰ " + card.created_by.slice(5);
      li.querySelector(".facts").append(span);
    }
    li.querySelector(".title").textContent = shown(card.title);
    const why = li.querySelector(".why");
    why.textContent = card.blocked_because ? "— " + shown(card.blocked_because) : "";
    why.hidden = !card.blocked_because;
    const beat = li.querySelector(".beat");
    beat.hidden = card.status !== "running";
    li.querySelector("time.hb").dateTime = card.heartbeat_at || "";
    li.querySelector(".activity").textContent = shown(card.doing || "");
    li.querySelector(".progress").textContent = shown(card.progress || "");
    refreshAges(li);
    return li;
  }

  function place(card) {
    const old = document.getElementById("card-" + card.id);
    if (old) old.remove();
    const section = columns[card.status];
    if (!section || !matches(card)) return;
    const list = section.querySelector("ol.cards");
    const key = sortKey(card.status, card.priority, card.id, card.updated_at, card.due_at);
    for (const li of list.children) {
      if (before(key, keyOf(li, card.status))) { list.insertBefore(render(card), li); return; }
    }
    // after every loaded card: shown only when nothing of the column is left unloaded
    if (!section.dataset.next) list.append(render(card));
  }

  function updateMore(section) {
    const more = section.querySelector("a.more");
    const loaded = section.querySelectorAll("li.card").length;
    const count = Number(section.dataset.count);
    if (!section.dataset.next) {
      if (!filter.profile && !filter.text && count > loaded) {
        // cards arrived beyond what is loaded: page on from the last loaded card
        const last = section.querySelector("li.card:last-child");
        if (last) section.dataset.next = cursorOf(last, section.dataset.status);
      }
    }
    more.hidden = !section.dataset.next;
    if (!filter.profile && !filter.text) {
      more.textContent = "+" + Math.max(0, count - loaded) + " more";
    }
  }
  function cursorOf(li, status) {
    if (status === "scheduled") return li.dataset.due + "~" + li.dataset.id;
    return FINISHED.has(status) ? li.dataset.updated + "~" + li.dataset.id
      : li.dataset.priority + "~" + li.dataset.id;
  }

  function setHeader(header) {
    const pause = document.getElementById("pause");
    let text = "spawning on";
    if (header.paused_globally && header.board_paused) text = "spawning paused (global and board)";
    else if (header.paused_globally) text = "spawning paused (global)";
    else if (header.board_paused) text = "spawning paused (board)";
    pause.textContent = text;
    pause.className = header.paused ? "paused" : "on";
    const d = header.dispatchers;
    const el = document.getElementById("dispatchers");
    el.textContent = !d.length ? "no dispatcher"
      : d.length === 1 ? "dispatcher: alive (pid " + d[0].pid + ")"
        : "dispatchers: " + d.length + " alive (pids " + d.map((x) => x.pid).join(", ") + ")";
    el.className = d.length ? "alive" : "none";
    for (const [id, paused, what] of [["pause-board", header.board_paused, "board"],
      ["pause-all", header.paused_globally, "all spawning"]]) {
      const form = document.getElementById(id);
      if (!form) continue;
      form.action = "/api/" + (paused ? "resume" : "pause");
      form.querySelector("button").textContent = (paused ? "resume " : "pause ") + what;
    }
  }

  function apply(message) {
    for (const id of message.removed || []) {
      const li = document.getElementById("card-" + id);
      if (li) li.remove();
    }
    for (const card of message.cards || []) place(card);
    if (message.counts) {
      let total = 0;
      for (const [status, n] of Object.entries(message.counts)) {
        total += n;
        const section = columns[status];
        if (!section) continue;
        section.dataset.count = n;
        section.querySelector(".count").textContent = n;
      }
      document.getElementById("total").textContent = total;
    }
    for (const section of Object.values(columns)) updateMore(section);
    if (message.header) setHeader(message.header);
    if (message.gone) say("this board no longer exists", true);
    if (drawer.openId && (message.cards || []).some((c) => String(c.id) === drawer.openId)) {
      if (drawerBusy()) drawer.stale = true; else loadDrawer(drawer.openId);
    }
  }

  // "more": the next page of a column, appended in place
  document.addEventListener("click", async (event) => {
    const more = event.target.closest && event.target.closest("a.more");
    if (!more) return;
    const section = more.closest("section.column");
    if (!section || !section.dataset.next) return;
    event.preventDefault();
    const params = new URLSearchParams({ board, after: section.dataset.next, limit: "50" });
    if (filter.profile) params.set("profile", body.dataset.filterProfile);
    if (filter.text) params.set("q", body.dataset.filterText);
    const response = await fetch("/api/columns/" + section.dataset.status + "?" + params,
      { credentials: "same-origin" });
    if (!response.ok) { say("HTTP " + response.status, true); return; }
    const page = await response.json();
    const list = section.querySelector("ol.cards");
    for (const card of page.cards) {
      const old = document.getElementById("card-" + card.id);
      if (old) old.remove();
      list.append(render(card));
    }
    section.dataset.next = page.next || "";
    updateMore(section);
  });

  // --- the live stream -------------------------------------------------------------------
  const live = document.getElementById("live");
  function connect() {
    const url = "/events?board=" + encodeURIComponent(board) + "&after=" +
      encodeURIComponent(body.dataset.cursor);
    const source = new EventSource(url);
    source.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
    source.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "live off"; });
    source.addEventListener("board", (event) => {
      const message = JSON.parse(event.data);
      body.dataset.cursor = message.cursor;
      apply(message);
      body.dataset.applied = String((Number(body.dataset.applied) || 0) + 1);
    });
    source.addEventListener("reset", () => location.reload());
    source.addEventListener("problem", (event) => say(JSON.parse(event.data).error, true));
    return source;
  }
  if (window.EventSource) connect();
  refreshAges();
})();
