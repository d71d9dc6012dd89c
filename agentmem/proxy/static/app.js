// agentmem inspection page: reads the tenant-scoped JSON APIs and draws what each call changed.
// Everything shown is untrusted text (user messages, model output, tool results), so the DOM is
// built with createElement/textContent only; the page's CSP refuses inline script besides.
"use strict";

(() => {
  const KEY_STORAGE = "agentmem.apiKey";
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Decision actions as the API publishes them (GET /v1/agentmem/actions), never spelled here.
  let ACTIONS = {};
  const state = { sessionId: null, session: null, reports: [], records: [], problems: [], call: -1 };

  class AuthError extends Error {}

  // -- DOM helpers ---------------------------------------------------------------------------

  /** An element; `props` are DOM properties (className, title, onclick...), never HTML. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (name === "dataset") Object.assign(node.dataset, value);
      else node[name] = value;
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** An SVG element; attribute values are numbers and class names computed here. */
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    return append(node, children);
  }

  const $ = (id) => document.getElementById(id);
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const time = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "–");
  const score = (s) => (typeof s === "number" ? s.toFixed(2) : "–");
  const pct = (before, after) => (before ? `${Math.round((100 * (before - after)) / before)}%` : "0%");

  function banner(message) {
    const node = $("banner");
    node.textContent = message || "";
    node.hidden = !message;
  }

  // -- the API -------------------------------------------------------------------------------

  async function api(path, options = {}) {
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...options, headers, cache: "no-store" });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    const message = body && body.error && body.error.message;
    if (response.status === 401) throw new AuthError(message || "The proxy asked for an API key.");
    if (!response.ok) throw new Error(`${response.status} ${message || response.statusText}`);
    return body;
  }

  const sessionPath = (id, rest = "") => `/v1/sessions/${encodeURIComponent(id)}${rest}`;

  /** Run an action; an auth failure opens the key form, anything else shows in the banner. */
  async function guarded(action) {
    try {
      await action();
      banner("");
    } catch (error) {
      if (error instanceof AuthError) {
        showAuth(sessionStorage.getItem(KEY_STORAGE)
          ? `The proxy rejected this key (401 Unauthorized): ${error.message}`
          : `This proxy requires an API key (401 Unauthorized): ${error.message} `
            + "Each key is a tenant and sees only its own sessions.");
      }
      else banner(`Request failed: ${error.message}`);
    }
  }

  // -- authentication ------------------------------------------------------------------------

  function showAuth(message) {
    $("auth-message").textContent = message;
    $("auth").hidden = false;
    $("app").hidden = true;
    updateKeyState();
    $("auth-key").focus();
  }

  function updateKeyState() {
    const hasKey = Boolean(sessionStorage.getItem(KEY_STORAGE));
    $("key-state").textContent = hasKey ? "API key set" : "";
    $("key-change").hidden = !hasKey;
  }

  // -- sessions --------------------------------------------------------------------------------

  async function loadSessions() {
    const list = await api("/v1/sessions?limit=200");
    $("auth").hidden = true;
    $("app").hidden = false;
    updateKeyState();
    const items = list.data.map((s) => el("li", {},
      el("button", {
        type: "button", className: "session" + (s.id === state.sessionId ? " selected" : ""),
        dataset: { session: s.id }, onclick: () => guarded(() => openSession(s.id)),
      },
      el("span", { className: "session-id" }, s.id),
      el("span", { className: "session-meta" },
        `${fmt(s.calls)} calls · ${fmt(s.turn_count)} turns · ${s.policy || "?"}`),
      el("span", { className: "session-meta" }, time(s.updated_at)))));
    $("sessions").replaceChildren(...(items.length ? items
      : [el("li", { className: "muted" }, "No sessions yet for this tenant.")]));
  }

  async function openSession(id, keepCall = false) {
    // The turns must load; reports and records that fail still leave the rest worth showing.
    const problems = [];
    const optional = (what, promise) => promise.catch((error) => {
      if (error instanceof AuthError) throw error;
      problems.push(`Could not load the ${what}: ${error.message}`);
      return { data: [] };
    });
    const [session, reports, records] = await Promise.all([
      api(sessionPath(id, "?include_superseded=true")),
      optional("reports", api(sessionPath(id, "/reports?limit=1000"))),
      optional("quarantine records", api(sessionPath(id, "/quarantine"))),
    ]);
    const sameSession = id === state.sessionId;
    Object.assign(state, { sessionId: id, session, reports: reports.data, records: records.data, problems });
    if (!(keepCall && sameSession) || state.call >= state.reports.length) state.call = state.reports.length - 1;
    history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
    for (const button of document.querySelectorAll("#sessions .session")) {
      button.classList.toggle("selected", button.dataset.session === id);
    }
    renderDetail();
  }

  // -- the session view ---------------------------------------------------------------------

  function renderDetail() {
    const { session, reports } = state;
    const report = reports[state.call] || null;
    $("detail").replaceChildren(
      el("div", { className: "session-head" },
        el("h2", {}, session.id),
        el("p", { className: "muted" },
          `policy ${session.policy || "?"} · model ${session.model || "?"} · ${fmt(session.calls)} calls · `
          + `${fmt(session.turn_count)} active turns (${fmt(session.stored_turn_count)} stored) · `
          + `updated ${time(session.updated_at)}`),
        state.problems.map((p) => el("p", { className: "warning" }, p))),
      el("section", { className: "card calls" },
        el("h3", {}, "Tokens per call"),
        reports.length ? tokenChart(reports, state.call) : el("p", { className: "muted" }, "No calls stored."),
        callPicker(reports)),
      el("div", { className: "columns" },
        el("section", { className: "card timeline-card" },
          el("h3", {}, "Timeline", report ? ` · as seen by call ${callNumber(state.call)}` : ""),
          legend(),
          timeline(session.turns, report)),
        el("div", { className: "side" },
          report ? callSummary(report) : null,
          report ? toolLoadout(report) : null,
          quarantinePanel(state.records))));
  }

  /** Calls are numbered from the session's first; the reports API returns the latest ones. */
  const callNumber = (index) => Math.max(0, (state.session.calls || 0) - state.reports.length) + index + 1;

  function selectCall(index) {
    state.call = index;
    renderDetail();
  }

  function callPicker(reports) {
    return el("div", { className: "call-picker" }, reports.map((r, i) => el("button", {
      type: "button", className: "call" + (i === state.call ? " selected" : ""),
      title: `${r.policy} · ${fmt(r.tokens_before)} → ${fmt(r.tokens_after)} tokens`,
      dataset: { call: String(i) }, onclick: () => selectCall(i),
    }, `Call ${callNumber(i)}`)));
  }

  /** Grouped bars (before, after) per call, in an SVG sized by its viewBox. */
  function tokenChart(reports, selected) {
    const width = 720, height = 150, top = 12, bottom = 22, left = 44;
    const max = Math.max(1, ...reports.map((r) => Math.max(r.tokens_before, r.tokens_after)));
    const slot = (width - left) / reports.length;
    const bar = Math.max(1, Math.min(22, slot * 0.36));
    const y = (v) => top + (height - top - bottom) * (1 - v / max);
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
      "aria-label": "tokens before and after hygiene, per call" },
      svg("line", { x1: left, x2: width, y1: y(0), y2: y(0), class: "axis" }),
      svg("text", { x: left - 6, y: y(max) + 4, class: "tick", "text-anchor": "end" }, fmt(max)),
      svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
    reports.forEach((r, i) => {
      const x = left + i * slot;
      const group = svg("g", { class: "bar-group" + (i === selected ? " selected" : ""), "data-call": i },
        svg("title", {}, `Call ${callNumber(i)}: ${fmt(r.tokens_before)} → ${fmt(r.tokens_after)} tokens `
          + `(−${pct(r.tokens_before, r.tokens_after)})`),
        svg("rect", { x, y: top, width: slot, height: height - top - bottom, class: "hit" }),
        svg("rect", { x: x + slot / 2 - bar, y: y(r.tokens_before), width: bar,
          height: y(0) - y(r.tokens_before), class: "before" }),
        svg("rect", { x: x + slot / 2, y: y(r.tokens_after), width: bar,
          height: y(0) - y(r.tokens_after), class: "after" }));
      if (reports.length <= 40) {
        group.append(svg("text", { x: x + slot / 2, y: height - 6, class: "tick", "text-anchor": "middle" },
          String(callNumber(i))));
      }
      group.addEventListener("click", () => selectCall(i));
      chart.append(group);
    });
    return el("div", { className: "chart-wrap" }, chart,
      el("div", { className: "chart-legend" },
        el("span", { className: "swatch before" }), "before hygiene ",
        el("span", { className: "swatch after" }), "sent to the model"));
  }

  function legend() {
    return el("p", { className: "legend small" },
      el("mark", { className: "kept" }, "kept sentence"), " ",
      el("del", { className: "pruned" }, "pruned"), " ",
      el("span", { className: "quarantined" }, "quarantined"), " ",
      el("span", { className: "muted" }, "(for the selected call; hover a span for the reason)"));
  }

  // -- the timeline -------------------------------------------------------------------------

  /** Decisions of one report by position: pruned spans, withheld spans, dropped messages. */
  function decisionsByPosition(report) {
    const out = new Map();
    const slot = (p) => {
      if (!out.has(p)) out.set(p, { pruned: [], quarantined: [], dropped: null });
      return out.get(p);
    };
    for (const stage of (report && report.stages) || []) {
      for (const d of stage.decisions) {
        const position = d.position ?? d.message_index;
        if (position === null || position === undefined) continue;
        if (d.action === ACTIONS.PRUNE_SPANS) {
          (d.spans || []).forEach((span, k) => slot(position).pruned.push({
            span, reason: `${stage.stage}: ${d.reason}`, score: (d.span_scores || [])[k] }));
        } else if (d.action === ACTIONS.QUARANTINE && d.span) {
          slot(position).quarantined.push({ span: d.span, reason: `quarantine: ${d.reason}`, score: d.score });
        } else if (d.action === ACTIONS.DROP_MESSAGE) {
          // detail.unit: every message the decision drops (a tool-call unit, a run of turns)
          const unit = (d.detail && d.detail.unit) || [position];
          const scores = (d.detail && d.detail.scores) || [];
          unit.forEach((index, k) => {
            slot(index).dropped = { reason: `${stage.stage}: ${d.reason}`, score: scores[k] ?? d.score };
          });
        }
      }
    }
    return out;
  }

  function textOf(message) {
    const content = message.content;
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.filter((p) => p.type === "text").map((p) => p.text || "").join("");
    return "";
  }

  /** The text cut into runs by class. Spans count code points (Python's indexing), so the
   *  text is split with Array.from rather than indexed as UTF-16. */
  function segments(text, sentences, marks) {
    const chars = Array.from(text);
    const cuts = new Set([0, chars.length]);
    for (const [a, b] of sentences) { cuts.add(a); cuts.add(b); }
    for (const list of [marks.quarantined, marks.pruned]) {
      for (const m of list) { cuts.add(m.span[0]); cuts.add(m.span[1]); }
    }
    const points = [...cuts].filter((c) => c >= 0 && c <= chars.length).sort((a, b) => a - b);
    const inside = (list, a, b) => list.find((m) => m.span[0] <= a && b <= m.span[1]);
    const inSentence = (a, b) => sentences.some(([s, e]) => s <= a && b <= e);
    const touched = marks.pruned.length > 0 || marks.quarantined.length > 0;
    const runs = [];
    for (let i = 0; i + 1 < points.length; i++) {
      const [a, b] = [points[i], points[i + 1]];
      if (a === b) continue;
      const q = inside(marks.quarantined, a, b);
      const p = q ? null : inside(marks.pruned, a, b);
      const kind = q ? "quarantined" : p ? "pruned" : touched && inSentence(a, b) ? "kept" : "plain";
      const mark = q || p;
      const last = runs[runs.length - 1];
      if (last && last.kind === kind && last.mark === mark) last.text += chars.slice(a, b).join("");
      else runs.push({ kind, mark, text: chars.slice(a, b).join("") });
    }
    return runs;
  }

  function runNode(run) {
    const title = run.mark ? `${run.mark.reason} (score ${score(run.mark.score)})` : "";
    if (run.kind === "pruned") return el("del", { className: "pruned", title }, run.text);
    if (run.kind === "quarantined") return el("span", { className: "quarantined", title }, run.text);
    if (run.kind === "kept") return el("mark", { className: "kept" }, run.text);
    return document.createTextNode(run.text);
  }

  /** The turns one call was sent, and its reply, then the active turns that came after.
   *  Decisions name positions, and a position can hold a newer turn once a client's history
   *  diverged; turn ids grow with every write, and the call's reply carries its report id, so
   *  the call saw, at each position, the newest turn written no later than its reply. */
  function turnsOfCall(turns, report) {
    const active = turns.filter((t) => t.active).sort((a, b) => a.position - b.position);
    const reply = report && turns.find((t) => t.report_id === report.id);
    if (!reply) {
      const last = report ? report.messages_before : Infinity;
      return active.map((turn) => ({
        turn, reply: Boolean(report) && turn.position === report.reply_position,
        later: turn.position >= last && !(report && turn.position === report.reply_position),
      }));
    }
    const seen = new Map();
    for (const t of turns) {
      if (t.id > reply.id || (t.position >= report.messages_before && t.id !== reply.id)) continue;
      if (!seen.has(t.position) || t.id > seen.get(t.position).id) seen.set(t.position, t);
    }
    const before = [...seen.values()].sort((a, b) => a.position - b.position)
      .map((turn) => ({ turn, later: false, reply: turn.id === reply.id }));
    const after = active.filter((t) => t.position > reply.position).map((turn) => ({ turn, later: true }));
    return [...before, ...after];
  }

  function timeline(turns, report) {
    const byPosition = decisionsByPosition(report);
    const flagged = new Map();
    for (const r of state.records) flagged.set(r.turn_id, (flagged.get(r.turn_id) || 0) + 1);
    const items = turnsOfCall(turns, report).map(({ turn, later, reply }) => {
      const marks = later ? { pruned: [], quarantined: [], dropped: null }
        : byPosition.get(turn.position) || { pruned: [], quarantined: [], dropped: null };
      const text = textOf(turn.message);
      const body = el("div", { className: "turn-text" + (marks.dropped ? " dropped" : "") });
      if (marks.dropped) {
        body.title = `${marks.dropped.reason} (score ${score(marks.dropped.score)})`;
        body.append(el("del", { className: "pruned" }, text));
      } else {
        for (const run of segments(text, turn.sentences || [], marks)) body.append(runNode(run));
      }
      const calls = (turn.message.tool_calls || []).map((c) => el("div", { className: "tool-call" },
        "→ ", el("code", {}, `${(c.function || {}).name || "?"}(${(c.function || {}).arguments || ""})`)));
      const badges = [
        marks.dropped ? el("span", { className: "badge bad" }, "dropped") : null,
        marks.pruned.length ? el("span", { className: "badge warn" }, `${marks.pruned.length} pruned`) : null,
        marks.quarantined.length ? el("span", { className: "badge bad" }, "withheld") : null,
        flagged.get(turn.id) ? el("span", { className: "badge flag" }, `${flagged.get(turn.id)} quarantine`) : null,
        reply ? el("span", { className: "badge" }, "reply of this call") : null,
        later ? el("span", { className: "badge" }, "after this call") : null,
        turn.active ? null : el("span", { className: "badge" }, "superseded later"),
        turn.partial ? el("span", { className: "badge warn" }, "partial") : null,
      ];
      return el("li", {
        className: `turn role-${turn.role}` + (later ? " later" : ""),
        dataset: { position: String(turn.position), turn: String(turn.id) },
      },
      el("div", { className: "turn-head" },
        el("span", { className: "role" }, turn.role),
        el("span", { className: "muted small" }, `#${turn.position} · ${turn.source} · ${fmt(turn.tokens)} tok`),
        badges),
      text || !calls.length ? body : null,
      calls);
    });
    return el("ol", { className: "timeline" }, items);
  }

  // -- the selected call ----------------------------------------------------------------------

  function callSummary(r) {
    const latency = Object.entries(r.latency_ms || {}).map(([k, v]) => `${k} ${v.toFixed(0)} ms`).join(" · ");
    const rows = [
      ["status", r.status], ["policy", r.policy], ["model", r.model || "–"],
      ["tokens", `${fmt(r.tokens_before)} → ${fmt(r.tokens_after)} (−${pct(r.tokens_before, r.tokens_after)})`],
      ["messages", `${fmt(r.messages_before)} → ${fmt(r.messages_after)}`],
      ["tools", `${fmt(r.tools_before)} → ${fmt(r.tools_after)}`],
      ["latency", latency || "–"], ["time", time(r.created_at)],
    ];
    return el("section", { className: "card summary" },
      el("h3", {}, `Call ${callNumber(state.call)} of ${fmt(state.session.calls)}`),
      el("dl", {}, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      (r.warnings || []).map((w) => el("p", { className: "warning small" }, w)),
      r.error ? el("p", { className: "warning small" }, r.error) : null,
      el("p", { className: "muted small mono" }, `report ${r.id}`));
  }

  function toolLoadout(r) {
    const stage = (r.stages || []).find((s) => s.stage === "tools");
    const decisions = stage ? stage.decisions : [];
    const summary = decisions.find((d) => d.action === ACTIONS.KEEP_TOOLS);
    const dropped = decisions.filter((d) => d.action === ACTIONS.DROP_TOOL);
    const scores = (summary && summary.detail.scores) || {};
    const pinned = (summary && summary.detail.pinned) || {};
    let body;
    if (!r.tools_before) {
      body = el("p", { className: "muted small" }, "No tools offered in this call.");
    } else if (!summary && !dropped.length) {
      body = el("p", { className: "muted small" },
        `All ${fmt(r.tools_before)} tools passed through unchanged (no tool filtering in this call).`);
    } else {
      const kept = (summary && summary.detail.kept) || [];
      body = [
        el("h4", {}, `Kept (${kept.length})`),
        el("ul", { className: "chips" }, kept.map((name) => el("li", {
          className: "chip kept-tool", title: pinned[name] ? `pinned: ${pinned[name]}` : `score ${score(scores[name])}`,
        }, name, pinned[name] ? " (pinned)" : ""))),
        el("h4", {}, `Dropped (${dropped.length})`),
        el("ul", { className: "chips" }, dropped.map((d) => el("li", {
          className: "chip dropped-tool", title: `${d.reason} (score ${score(d.score)})`,
        }, d.tool))),
      ];
    }
    return el("section", { className: "card tools" },
      el("h3", {}, "Tool loadout", el("span", { className: "muted small" },
        ` ${fmt(r.tools_before)} offered → ${fmt(r.tools_after)} sent`)), body);
  }

  // -- quarantine -----------------------------------------------------------------------------

  function quarantinePanel(records) {
    const cards = records.map((r) => el("li", {
      className: `record status-${r.status}`, dataset: { record: r.id },
    },
    el("div", { className: "record-head" },
      el("span", { className: `badge ${r.status === "active" ? "bad" : "ok"} status` }, r.status),
      el("span", { className: "badge" }, r.kind),
      el("span", { className: "muted small" }, `${r.detector} · score ${score(r.score)} · turn #${r.position} (${r.source})`)),
    el("blockquote", { className: "record-text" }, r.text),
    el("p", { className: "small reason" }, r.reason),
    r.note ? el("p", { className: "small muted" }, `note: ${r.note}`) : null,
    el("div", { className: "record-actions" },
      el("button", { type: "button", className: "release", disabled: r.status !== "active",
        title: "Return the sentence to the context from the next call on",
        onclick: () => setStatus(r.id, "release") }, "Release"),
      el("button", { type: "button", className: "confirm ghost", disabled: r.status !== "active",
        title: "Release, and treat the claim as true: it is never quarantined again",
        onclick: () => setStatus(r.id, "confirm") }, "Confirm"),
      el("span", { className: "muted small" }, time(r.created_at)))));
    return el("section", { className: "card quarantine" },
      el("h3", {}, `Quarantine (${records.filter((r) => r.status === "active").length} active of ${records.length})`),
      cards.length ? el("ul", { className: "records" }, cards)
        : el("p", { className: "muted small" }, "Nothing quarantined in this session."));
  }

  function setStatus(recordId, verb) {
    return guarded(async () => {
      await api(sessionPath(state.sessionId, `/quarantine/${encodeURIComponent(recordId)}/${verb}`),
        { method: "POST" });
      await openSession(state.sessionId, true);
    });
  }

  // -- start ----------------------------------------------------------------------------------

  async function start() {
    ACTIONS = (await api("/v1/agentmem/actions")).actions;
    await loadSessions();
    const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
    if (wanted) await openSession(wanted);
  }

  function refresh() {
    return guarded(async () => {
      await loadSessions();
      if (state.sessionId) await openSession(state.sessionId, true);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("auth-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("auth-key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      $("auth-key").value = "";
      guarded(start);
    });
    $("key-change").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      Object.assign(state, { sessionId: null, session: null, reports: [], records: [], problems: [], call: -1 });
      $("sessions").replaceChildren();
      $("detail").replaceChildren(el("p", { className: "empty muted" }, "Select a session."));
      showAuth("Enter the proxy API key of the tenant to inspect.");
    });
    $("refresh").addEventListener("click", refresh);
    guarded(start);
  });
})();
