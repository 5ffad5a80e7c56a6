// The toolstub dashboard. Everything on the page comes from the operator
// API (/toolstub/v1/) through this script's own fetch() requests, with the
// credential the person signed in with as a header: never in a URL, kept
// in sessionStorage only (this tab, this browser session). Text from the
// server is always set with textContent, never parsed as HTML.
"use strict";

(function () {
  const API = "v1/"; // relative to /toolstub/
  const STORE_KEY = "toolstub.dashboard.credential";
  const PAGE_SIZE = 20;
  const WINDOW_CHARS = 4000;
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  const state = {
    credential: null, // {key, header, admin}
    session: null, // the session the outputs are filtered to
    page: 0,
    output: null, // {ref, offset, total}
    stats: null,
  };

  // --- credential ----------------------------------------------------------

  function loadCredential() {
    try {
      const raw = window.sessionStorage.getItem(STORE_KEY);
      const c = raw ? JSON.parse(raw) : null;
      return c && typeof c.key === "string" ? c : null;
    } catch (_) {
      return null;
    }
  }

  function saveCredential(c) {
    window.sessionStorage.setItem(STORE_KEY, JSON.stringify(c));
  }

  function forgetCredential() {
    window.sessionStorage.removeItem(STORE_KEY);
  }

  function headers(c) {
    const h = { Accept: "application/json" };
    if (c && c.key) {
      if (c.header === "authorization") {
        h.Authorization = /^bearer /i.test(c.key) ? c.key : "Bearer " + c.key;
      } else {
        h[c.header] = c.key;
      }
    }
    if (c && c.admin) h["x-toolstub-admin-token"] = c.admin;
    return h;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // GET an operator endpoint; the answer's JSON, or an ApiError.
  async function get(path, params, credential) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== null && v !== undefined && v !== "") query.set(k, String(v));
    }
    const qs = query.toString();
    const response = await fetch(API + path + (qs ? "?" + qs : ""), {
      method: "GET",
      headers: headers(credential === undefined ? state.credential : credential),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const e = (body && body.error) || {};
      throw new ApiError(response.status, e.code || "", e.message || response.statusText);
    }
    return body;
  }

  // --- small DOM helpers ---------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  const n = (v) => Number(v || 0);
  const fmt = (v) => n(v).toLocaleString("en-US");
  function when(ms) {
    if (!ms) return "";
    const d = new Date(ms);
    const p = (x) => String(x).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  const short = (s, k) => (s && s.length > k ? s.slice(0, k) + "…" : s || "");

  // A table: columns [{title, value(row) -> string|Node, num?}], rows.
  function table(columns, rows, onRow) {
    const head = el("tr", {}, ...columns.map((c) => el("th", { class: c.num ? "num" : "", text: c.title })));
    const body = rows.map((r) => {
      const tr = el(
        "tr",
        {},
        ...columns.map((c) => {
          const v = c.value(r);
          const td = el("td", { class: c.num ? "num" : "" });
          if (v instanceof Node) td.append(v);
          else td.textContent = v;
          return td;
        })
      );
      if (onRow) {
        tr.classList.add("clickable");
        tr.tabIndex = 0;
        tr.addEventListener("click", () => onRow(r));
        tr.addEventListener("keydown", (ev) => {
          if (ev.key === "Enter") onRow(r);
        });
      }
      return tr;
    });
    return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
  }

  function empty(text) {
    return el("p", { class: "empty", text });
  }

  // --- totals and charts ---------------------------------------------------

  const TOTALS = [
    ["tokens_saved", "tokens saved"],
    ["tokens_saved_first_seen", "of which first seen"],
    ["tokens_saved_repeated", "of which repeated"],
    ["chars_saved", "characters saved"],
    ["outputs", "outputs externalized"],
    ["outputs_first_seen", "of which first seen"],
    ["requests", "requests"],
    ["recall_calls", "recall calls"],
    ["input_tokens", "input tokens"],
    ["cache_read_tokens", "cache-read tokens"],
    ["cache_write_tokens", "cache-write tokens"],
    ["output_tokens", "output tokens"],
  ];

  function renderTotals(stats) {
    const box = $("totals");
    clear(box);
    const totals = (stats && stats.totals) || {};
    for (const [key, label] of TOTALS) {
      const value = el("span", { class: "value", id: "total-" + key.replace(/_/g, "-"), text: fmt(totals[key]) });
      value.dataset.value = String(n(totals[key]));
      box.append(el("div", { class: "total" }, value, el("span", { class: "label", text: label })));
    }
    const pricing = stats && stats.pricing;
    if (pricing && typeof pricing.estimated_saving_usd === "number") {
      $("saving-usd").textContent = "≈ $" + pricing.estimated_saving_usd.toFixed(2) + " saved";
      $("pricing-method").textContent = pricing.method || "";
      $("pricing").hidden = false;
    } else {
      $("pricing").hidden = true;
    }
  }

  // The series as a bar chart, one <rect class="point"> per bucket.
  function renderSeries(stats) {
    const box = $("series-chart");
    clear(box);
    const series = (stats && Array.isArray(stats.series) && stats.series) || [];
    if (!series.length) {
      box.append(empty("No data yet: send some traffic through toolstub."));
      return;
    }
    const metric = $("series-metric").value;
    const W = 1000, H = 220, L = 70, B = 28, T = 10, R = 10;
    const max = Math.max(1, ...series.map((p) => n(p[metric])));
    const first = n(series[0].at), last = n(series[series.length - 1].at);
    const bucket = Number($("bucket").value) || 60000;
    const span = Math.max(bucket, last - first + bucket);
    const x = (at) => L + ((at - first) / span) * (W - L - R);
    const bw = Math.max(2, Math.min(40, ((W - L - R) * bucket) / span - 2));
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "series", role: "img", "aria-label": metric + " over time" });
    for (let i = 0; i <= 4; i++) {
      const y = T + ((H - T - B) * i) / 4;
      chart.append(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
      const label = svg("text", { x: L - 6, y: y + 4, class: "axis", "text-anchor": "end" });
      label.textContent = fmt(Math.round((max * (4 - i)) / 4));
      chart.append(label);
    }
    for (const p of series) {
      const v = n(p[metric]);
      const h = ((H - T - B) * v) / max;
      const rect = svg("rect", { x: x(n(p.at)), y: H - B - h, width: bw, height: Math.max(h, v > 0 ? 1 : 0), class: "point" });
      rect.dataset.at = String(p.at);
      rect.dataset.value = String(v);
      const tip = svg("title");
      tip.textContent = `${when(n(p.at))}: ${fmt(v)} ${metric.replace("_", " ")}, ${fmt(p.requests)} requests`;
      rect.append(tip);
      chart.append(rect);
    }
    for (const [at, anchor] of [[first, "start"], [last, "end"]]) {
      const label = svg("text", { x: anchor === "start" ? L : W - R, y: H - 8, class: "axis", "text-anchor": anchor });
      label.textContent = when(at);
      chart.append(label);
    }
    box.append(chart);
  }

  // Rows with a horizontal bar for tokens saved, then the figures.
  function renderBreakdown(id, rows, key) {
    const box = $(id);
    clear(box);
    if (!rows || !rows.length) {
      box.append(empty("No data yet."));
      return;
    }
    const max = Math.max(1, ...rows.map((r) => n(r.tokens_saved)));
    // The name, with a bar of its share of the tokens saved under it.
    const named = (r) => {
      const s = svg("svg", { viewBox: "0 0 100 4", class: "hbar", preserveAspectRatio: "none" });
      s.append(svg("rect", { x: 0, y: 0, width: (100 * n(r.tokens_saved)) / max, height: 4, class: "bar" }));
      return el("div", {}, el("span", { text: r[key] || "(none)" }), s);
    };
    box.append(
      table(
        [
          { title: key, value: named },
          { title: "tokens saved", value: (r) => fmt(r.tokens_saved), num: true },
          { title: "first seen", value: (r) => fmt(r.tokens_saved_first_seen), num: true },
          { title: "repeated", value: (r) => fmt(r.tokens_saved_repeated), num: true },
          { title: "chars saved", value: (r) => fmt(r.chars_saved), num: true },
          { title: "outputs", value: (r) => fmt(r.outputs), num: true },
        ],
        rows
      )
    );
  }

  function renderSessions(stats) {
    const box = $("sessions");
    clear(box);
    const rows = (stats && stats.sessions) || [];
    if (!rows.length) {
      box.append(empty(stats ? "No sessions yet." : "No data."));
      return;
    }
    box.append(
      table(
        [
          { title: "session", value: (r) => el("code", { text: r.session_id }) },
          { title: "first", value: (r) => when(r.first_at) },
          { title: "last", value: (r) => when(r.last_at) },
          { title: "turns", value: (r) => fmt(r.turns), num: true },
          { title: "tokens sent", value: (r) => fmt(n(r.input_tokens) + n(r.cache_read_tokens) + n(r.cache_write_tokens)), num: true },
          { title: "tokens saved", value: (r) => fmt(r.tokens_saved), num: true },
          { title: "recall calls", value: (r) => fmt(r.recall_calls), num: true },
        ],
        rows,
        (r) => filterSession(r.session_id)
      )
    );
  }

  async function loadStats() {
    const missing = $("stats-missing");
    let stats = null;
    try {
      stats = await get("stats", { session: state.session, bucket_ms: $("bucket").value });
      missing.hidden = true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) throw e;
      missing.textContent =
        e instanceof ApiError && e.status === 404
          ? "No data: this toolstub does not report statistics (/toolstub/v1/stats answered 404)."
          : "No data: " + e.message;
      missing.hidden = false;
    }
    state.stats = stats;
    renderTotals(stats);
    renderSeries(stats);
    renderBreakdown("by-tool", stats && stats.by_tool, "tool");
    renderBreakdown("by-kind", stats && stats.by_kind, "kind");
    renderSessions(stats);
  }

  // --- outputs -------------------------------------------------------------

  // The list endpoint has a limit but no offset: ask for the pages up to
  // this one plus one row (to know whether there is an older page).
  async function loadOutputs() {
    const box = $("outputs");
    const limit = (state.page + 1) * PAGE_SIZE + 1;
    const answer = await get("results", { limit, session: state.session });
    const all = (answer && answer.results) || [];
    const rows = all.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
    clear(box);
    if (!rows.length) {
      box.append(empty(state.page ? "No older outputs." : "No externalized outputs yet."));
    } else {
      box.append(
        table(
          [
            { title: "created", value: (r) => when(r.created_at) },
            { title: "tool", value: (r) => r.tool_name || "" },
            { title: "kind", value: (r) => r.kind },
            { title: "characters", value: (r) => fmt(r.original_chars), num: true },
            { title: "session", value: (r) => el("code", { text: short(r.session_id, 14) }) },
            { title: "ref", value: (r) => el("code", { class: "ref", text: r.ref }) },
          ],
          rows,
          (r) => openOutput(r.ref, 0)
        )
      );
    }
    $("outputs-newer").disabled = state.page === 0;
    $("outputs-older").disabled = all.length < limit;
    $("outputs-page").textContent = rows.length
      ? `${state.page * PAGE_SIZE + 1}–${state.page * PAGE_SIZE + rows.length}`
      : "";
  }

  async function openOutput(ref, offset) {
    const view = $("output-view");
    try {
      const w = await get("results/" + encodeURIComponent(ref), { offset, limit: WINDOW_CHARS });
      const m = w.metadata || {};
      state.output = { ref, offset: n(w.offset), total: n(w.total_chars), next: w.next_offset };
      $("output-title").textContent = (m.tool_name || "tool") + " output";
      $("output-meta").textContent = [
        "ref " + ref,
        m.synopsis_kind,
        fmt(m.original_chars) + " characters",
        "session " + m.session_id,
        when(m.created_at),
      ].join(" · ");
      $("output-stub").textContent = typeof m.stub === "string" ? m.stub : "(this toolstub does not report the stub)";
      $("output-original").textContent = w.content;
      const end = n(w.offset) + [...w.content].length;
      $("window-range").textContent = `characters ${fmt(w.offset)}–${fmt(end)} of ${fmt(w.total_chars)}`;
      $("window-prev").disabled = n(w.offset) === 0;
      $("window-next").disabled = !w.has_more;
      view.hidden = false;
      if (offset === 0) view.scrollIntoView({ block: "start" });
    } catch (e) {
      if (handleAuth(e)) return;
      $("output-meta").textContent = "Could not open " + ref + ": " + e.message;
      view.hidden = false;
    }
  }

  function filterSession(session) {
    state.session = session;
    state.page = 0;
    $("session-filter").textContent = "session " + session;
    $("session-filter").hidden = false;
    $("clear-session").hidden = false;
    refresh();
  }

  // --- the page's states ---------------------------------------------------

  function showSignIn(message) {
    $("board").hidden = true;
    $("sign-in").hidden = false;
    $("sign-out").hidden = true;
    $("refresh").hidden = true;
    $("who").hidden = true;
    const error = $("sign-in-error");
    error.textContent = message || "";
    error.hidden = !message;
  }

  // A 401 means the admin token is missing or wrong: back to the form.
  function handleAuth(e) {
    if (e instanceof ApiError && e.status === 401) {
      forgetCredential();
      state.credential = null;
      $("admin-token-row").hidden = false;
      showSignIn("This server requires its admin token (or the one given was wrong).");
      return true;
    }
    return false;
  }

  async function refresh() {
    try {
      await Promise.all([loadStats(), loadOutputs()]);
      $("scope").textContent = state.session
        ? "Showing one session of your tenant."
        : "Showing every session of your tenant (the tenant is your API key's).";
    } catch (e) {
      if (!handleAuth(e)) {
        $("scope").textContent = "Could not load: " + e.message;
      }
    }
  }

  function showBoard() {
    $("sign-in").hidden = true;
    $("board").hidden = false;
    $("sign-out").hidden = false;
    $("refresh").hidden = false;
    const c = state.credential;
    $("who").textContent = "signed in with a key sent as " + c.header + (c.admin ? ", and the admin token" : "");
    $("who").hidden = false;
    refresh();
  }

  // Whether the server wants an admin token: a request with no credential
  // and a zero limit (it reads nothing) answers 401 only then.
  async function probeAdminToken() {
    try {
      await get("results", { limit: 0 }, null);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) $("admin-token-row").hidden = false;
    }
  }

  function init() {
    $("sign-in-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      $("sign-in-error").hidden = true;
      const key = $("api-key").value.trim();
      if (!key) return;
      state.credential = { key, header: $("key-header").value, admin: $("admin-token").value };
      saveCredential(state.credential);
      // The inputs are cleared: the secret lives in sessionStorage only.
      $("api-key").value = "";
      $("admin-token").value = "";
      showBoard();
    });
    $("sign-out").addEventListener("click", () => {
      forgetCredential();
      state.credential = null;
      state.session = null;
      state.stats = null;
      state.page = 0;
      // Nothing of this tenant's stays on the page.
      for (const id of ["totals", "series-chart", "by-tool", "by-kind", "sessions", "outputs",
        "output-title", "output-meta", "output-stub", "output-original", "window-range",
        "outputs-page", "saving-usd", "pricing-method", "scope", "who", "session-filter"]) {
        clear($(id));
      }
      $("pricing").hidden = true;
      $("session-filter").hidden = true;
      $("clear-session").hidden = true;
      $("output-view").hidden = true;
      showSignIn("");
      probeAdminToken();
    });
    $("refresh").addEventListener("click", refresh);
    $("series-metric").addEventListener("change", () => renderSeries(state.stats));
    $("bucket").addEventListener("change", () => loadStats().catch(handleAuth));
    $("outputs-newer").addEventListener("click", () => {
      state.page = Math.max(0, state.page - 1);
      loadOutputs().catch(handleAuth);
    });
    $("outputs-older").addEventListener("click", () => {
      state.page += 1;
      loadOutputs().catch(handleAuth);
    });
    $("clear-session").addEventListener("click", () => {
      state.session = null;
      state.page = 0;
      $("session-filter").hidden = true;
      $("clear-session").hidden = true;
      refresh();
    });
    $("close-output").addEventListener("click", () => {
      $("output-view").hidden = true;
      state.output = null;
    });
    $("window-prev").addEventListener("click", () => {
      const o = state.output;
      if (o) openOutput(o.ref, Math.max(0, o.offset - WINDOW_CHARS));
    });
    $("window-next").addEventListener("click", () => {
      const o = state.output;
      if (o && o.next !== null && o.next !== undefined) openOutput(o.ref, o.next);
    });

    state.credential = loadCredential();
    if (state.credential) showBoard();
    else {
      showSignIn("");
      probeAdminToken();
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
