// The magistrate dashboard's shell: DOM and API helpers, the API token, the approve form,
// and the router. The pages are in runs-page.js (the runs table, starting a run,
// approvals) and run-page.js (a run's graph, verdicts, timeline, time travel), loaded
// after this file as classic scripts sharing one global scope. Plain DOM, no build step;
// every text from a run is set as text, never as HTML.
"use strict";

const ROOT = document.body.dataset.root || "";
const main = document.getElementById("main");

// ---------------------------------------------------------------- helpers

function h(tag, attrs, ...children) {
  const el = document.createElementNS(
    tag === "svg" || attrs?.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag,
  );
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "svg" || value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replace an element's children; arrays are flattened and empty values left out.
function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false || child === "") continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Text from a run is shown in a <bdi>: a right-to-left override in it ends where it does,
// never turning around the text after it ("(hitl)", "tokens"). An identifier (a run id, a
// node id, a memory key) also shows its invisible characters (controls, zero-width and
// direction marks) as "⟨U+202E⟩": two ids that look alike are told apart, and "abc" RLO
// "gnp.exe" does not pass for "abcexe.png".
const HIDDEN = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;
const reveal = (text) => String(text ?? "").replace(HIDDEN, (c) =>
  `\u27e8U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}\u27e9`);
const ident = (text) => h("bdi", { class: "ident" }, reveal(text));
const iso = (text) => h("bdi", {}, text);
// Ids joined for a sentence ("a, b"), each an ident.
const idents = (list, sep = ", ") => list.flatMap((x, i) => (i ? [sep, ident(x)] : [ident(x)]));
// A path of node ids (thousands, for a long run) as one text: each id revealed and in
// isolate marks (FSI ... PDI), so ids written right to left keep their order.
const pathText = (list) => (list.length ? list.map((x) => `\u2068${reveal(x)}\u2069`).join(" → ") : "—");

const fmtTime = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
const fmtInt = (n) => Number(n).toLocaleString("en-US");
// "1 event", "2 events": a count with its noun in the number it needs.
const plural = (n, one, many = `${one}s`) => `${fmtInt(n)} ${Number(n) === 1 ? one : many}`;
// Who executes a run, from the store's claims (not the log): the owner of a live claim;
// a running run that no live claim holds waits for a worker to claim it.
const OWNERSHIP = { waiting: "waiting for a worker", unclaimed: "", unrecorded: "not recorded" };
// A claim kept while an abandoned attempt still runs in its owner says which node drains.
const drainingText = (r) => (r.draining ? ` (draining ${r.draining} since ${fmtTime(r.draining_since)})` : "");
const ownerText = (r) => (r.ownership === "claimed" ? r.owner : OWNERSHIP[r.ownership] ?? "") + drainingText(r);
const ownerCell = (r) => h("td", { class: r.ownership === "claimed" ? "mono owner" : `small owner o-${r.ownership}`, "data-ownership": r.ownership }, ownerText(r));
// A claim expires with nothing written to the log when its owner dies, so no live event
// tells a page that its owner is gone: a page showing a claimed run reads it again every
// OWNER_RECHECK_MS (a worker renews its lease every third of it; 15 s by default).
const OWNER_RECHECK_MS = 5000;
let ownerTimer = null;
function recheckOwners(runs, reload, shown) {
  clearTimeout(ownerTimer);
  ownerTimer = null;
  // ``shown`` is an element of the page that asks: a page left meanwhile asks nothing.
  if (main.contains(shown) && runs.some((r) => r.ownership === "claimed")) {
    ownerTimer = setTimeout(reload, OWNER_RECHECK_MS);
  }
}
const badge = (prefix, value) => (value ? h("span", { class: `badge ${prefix}-${value}` }, value) : "");

function token() {
  return sessionStorage.getItem("magistrate-token") || "";
}

// The token handed over in the address's fragment (#token=...), taken out of the address.
// A fragment that is not valid percent-encoding is taken as it is, not left to stop the page.
function takeTokenFromHash() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    let given = match[1];
    try { given = decodeURIComponent(given); } catch { /* kept as written */ }
    sessionStorage.setItem("magistrate-token", given);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

// Setting or forgetting the token shows the page again: what a missing token kept from
// it (a 401) is read now.
function renderTokenState() {
  const box = document.getElementById("token-state");
  fill(box);
  const changed = () => { renderTokenState(); route(); };
  if (token()) {
    box.append("API token set ", h("button", { class: "small", onclick: () => {
      sessionStorage.removeItem("magistrate-token"); changed(); } }, "forget"));
  } else {
    const input = h("input", { type: "password", placeholder: "API token", id: "token-input", "aria-label": "API token" });
    box.append(h("form", { id: "token-form", onsubmit: (e) => {
      e.preventDefault();
      if (!input.value.trim()) return;
      sessionStorage.setItem("magistrate-token", input.value.trim()); changed();
    } }, input, " ", h("button", { type: "submit" }, "use")));
  }
}

// The token goes with every request: a server beyond loopback asks it for reads too.
function authHeaders(headers) {
  if (token()) headers.Authorization = `Bearer ${token()}`;
  return headers;
}

async function api(path, options = {}) {
  const init = { ...options, headers: authHeaders({ Accept: "application/json" }) };
  if (options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  let response;
  try { response = await fetch(ROOT + path, init); }
  catch (e) { throw unreachable(e); }
  const data = await response.text().then(parseJSON).catch(() => ({}));
  if (!response.ok) {
    const error = new Error(data.detail || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

// A request that got no answer at all (the server is down or restarting, the network is
// gone): said as such, not as the browser's "Failed to fetch".
function unreachable(e) {
  const error = new Error(`cannot reach the server (${e.message})`);
  error.status = 0;
  return error;
}

// Whether the page's live stream is connected, in the header: a page whose stream dropped
// says so (what it shows may be stale) until it is back, and then reads what it missed.
function liveState(state, text = "") {
  const box = document.getElementById("live");
  if (!box) return;
  box.dataset.state = state;
  box.className = `small live-${state}`;
  box.textContent = text;
}

// A server-sent event stream read with fetch (EventSource cannot send the token): calls
// onMessage(type, data, id) per message and reconnects after it drops (a second, then
// longer, up to 5 s), asking url() again (a page passes where it got to). onOpen(again)
// is called on each connection, again true after a drop: a page reads what it missed.
// close() ends it.
function openStream(url, onMessage, onOpen) {
  const abort = new AbortController();
  let closed = false;
  let opened = 0;
  async function read() {
    let response;
    try {
      response = await fetch(ROOT + url(), { headers: authHeaders({ Accept: "text/event-stream" }), signal: abort.signal });
    } catch (e) { throw unreachable(e); }
    if (!response.ok || !response.body) {
      const data = await response.text().then(parseJSON).catch(() => ({}));
      throw Object.assign(new Error(data.detail || `HTTP ${response.status}`), { status: response.status });
    }
    liveState("live", "live");
    onOpen?.(opened++ > 0);
    wait = 1000;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let type = "message", data = "", id = null;
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) type = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
          else if (line.startsWith("id: ")) id = line.slice(4);
        }
        if (data) onMessage(type, data, id);
      }
    }
  }
  let wait = 1000;
  (async () => {
    liveState("connecting", "connecting…");
    while (!closed) {
      let why = "the server closed the stream";
      try { await read(); } catch (e) {
        why = e.status > 0 ? `refused: ${refusal(e)}` : e.status === 0 ? e.message : `the connection broke (${e.message})`;
      }
      if (closed) break;
      liveState("lost", `live updates lost: ${why}; retrying, what is shown may be out of date`);
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(wait * 2, 5000);
    }
  })();
  return { close() { closed = true; abort.abort(); liveState("off"); } };
}

// fn at most once per ms: the first call starts a wait of ms, and the calls during it are
// served by the one run at its end. A steady stream of calls (a busy run's events) runs fn
// every ms, where a debounce would put it off for as long as the calls go on.
function coalesce(fn, ms) {
  let timer = null;
  return () => { if (timer === null) timer = setTimeout(() => { timer = null; fn(); }, ms); };
}

// Runs action() with button (and the other buttons of its form) disabled: a double click
// sends one request, not two (the second would start a second run, or be refused).
async function once(button, action) {
  const group = button.form ? [...button.form.querySelectorAll("button")] : [button];
  if (button.disabled) return;
  group.forEach((b) => { b.disabled = true; });
  try { await action(); } finally { group.forEach((b) => { b.disabled = false; }); }
}

// Numbers as the JSON text has them. A JS number forgets how it was written: 1.0 reads
// as 1, and an integer past 2^53 loses digits. A number whose text JS would not write back
// the same (1.0, 1e16, 12345678901234567891) is kept as an Exact: shown as its text,
// written back by JSON.stringify as that text (JSON.rawJSON), a number in arithmetic. So
// a value shown or sent back is the one the log holds (1.0 and 1 differ in Python), and
// typed input keeps every number as typed (1e400 goes to the server, which refuses it,
// instead of turning into null). A browser without JSON.parse's source text (a reviver's
// context.source, with JSON.rawJSON) reads numbers as JS numbers.
const RAW = typeof JSON.rawJSON === "function";
class Exact {
  constructor(source) { this.source = source; }
  toJSON() { return JSON.rawJSON(this.source); }
  toString() { return this.source; }
  valueOf() { return Number(this.source); }
}
function exact(key, value, context) {
  if (RAW && typeof value === "number" && context?.source !== undefined && JSON.stringify(value) !== context.source) {
    return new Exact(context.source);
  }
  return value;
}
const parseJSON = (text) => JSON.parse(text, exact);

// Memory keys and node ids are data: a name such as "constructor" or "__proto__" must not
// meet Object.prototype, so maps keyed by them have none and lookups ask for own keys.
const dict = () => Object.create(null);
const own = (object, key) => (object && Object.hasOwn(object, key) ? object[key] : undefined);

// Typed input: each value is read as JSON (numbers, true/false, objects) or else as text.
function typedValue(text) {
  const trimmed = text.trim();
  if (trimmed === "") return "";
  try { return JSON.parse(trimmed, exact); } catch { return text; }
}

// A value as a field's text that typedValue reads back as the same value: a string that
// would read as JSON ("42", "true") is shown quoted, so editing it keeps it a string.
function fieldText(value) {
  return typeof value === "string" && typedValue(value) === value ? value : JSON.stringify(value);
}

function inputRows(keys) {
  const box = h("div", { class: "inputs" });
  const add = (key = "") => box.insertBefore(
    h("div", { class: "pair" },
      h("input", { class: "key", placeholder: "key", value: key, "aria-label": "key" }),
      h("input", { class: "value", placeholder: "value (JSON or text)", "data-key": key,
                   "aria-label": `value of ${key || "key"}` })),
    box.lastChild);
  box.append(h("button", { type: "button", class: "small", onclick: () => add() }, "+ key"));
  for (const key of keys) add(key);
  if (!keys.length) add();
  box.values = () => {
    const data = dict();
    for (const pair of box.querySelectorAll(".pair")) {
      const [key, value] = pair.querySelectorAll("input");
      if (key.value.trim()) data[key.value.trim()] = typedValue(value.value);
    }
    return data;
  };
  return box;
}

// A paused run's form. At a gate (reason hitl) it approves or rejects: prefilled with the
// current memory of each key the gated node reads, beside the node's description and
// success criteria, and sending only the keys the approver changed or added (a field
// left as it was writes nothing). Elsewhere (a pause asked for, a node's question) it
// resumes, with the input given. The card then says what the server recorded.
const APPROVER_KEY = "magistrate.approver";

// What a form or an action recorded, or why the server refused it, kept at the top of the
// page: the form itself goes when the page shows the run anew (it moved on meanwhile).
function recorded(text, refused = false) {
  let box = document.getElementById("recorded");
  if (!box || !main.contains(box)) {
    box = h("div", { id: "recorded", role: "status" });
    main.prepend(box);
  }
  box.prepend(h("p", { class: refused ? "refused error" : "recorded" }, text));
}

// Why the server refused a request, as the API said it.
const refusal = (e) => (e.status !== 401 ? e.message : token()
  ? "401: the API token was refused: forget it and set the right one (top right)"
  : "401: set the API token first (top right)");

function approveForm(run, onDone) {
  const gate = run.paused?.reason === "hitl";
  const nodeId = run.paused?.node_id;
  const rows = h("div", { class: "inputs" });
  const about = h("div", { class: "gate small" });
  const message = h("div", { class: "error" });
  const by = h("input", { class: "by", name: "by", placeholder: "your name", "aria-label": "approved by",
                          value: localStorage.getItem(APPROVER_KEY) || "" });
  const reason = h("input", { class: "reason", name: "reason", placeholder: "why (for a rejection)", "aria-label": "reason" });
  const form = h("form", { class: "approve", "data-gate": gate ? nodeId : null });
  const original = new Map(); // key -> the text its field was prefilled with
  // The run's last seq as this form shows it: a decision on a run that moved on since (a
  // cancel, a resume with input) is refused, so nobody approves memory they did not see.
  const seen = run.last_seq ?? null;
  const addRow = (key = "", text = "", known = false) => {
    const pair = h("div", { class: "pair" },
      h("input", { class: "key", placeholder: "key", value: key, "aria-label": "key", readonly: known }),
      h("textarea", { class: "value", rows: 1, placeholder: "value (JSON or text)", "data-key": key, "aria-label": `value of ${key || "key"}` }, text));
    rows.insertBefore(pair, rows.lastChild);
    if (known) original.set(key, text);
  };
  rows.append(h("button", { type: "button", class: "small", onclick: () => addRow() }, "+ key"));
  const changed = () => {
    const data = dict();
    for (const pair of rows.querySelectorAll(".pair")) {
      const key = pair.querySelector(".key").value.trim();
      const text = pair.querySelector(".value").value;
      if (!key || (original.has(key) && original.get(key) === text)) continue;
      if (!original.has(key) && text.trim() === "") continue;
      data[key] = typedValue(text);
    }
    return data;
  };
  const done = (text) => {
    form.replaceChildren(h("p", { class: "recorded" }, text));
    recorded([ident(run.run_id), `: ${text}`]);
    onDone?.();
  };
  // One decision at a time: the form's buttons are disabled while one is on its way.
  const send = (button, action, body, said) => {
    message.textContent = "";
    if (gate && !by.value.trim()) { message.textContent = "say who you are first (approved by)"; return; }
    if (gate) localStorage.setItem(APPROVER_KEY, by.value.trim());
    return once(button, async () => {
      try {
        const answer = await api(`/api/runs/${encodeURIComponent(run.run_id)}/${action}`, { body });
        done(`${said}${answer.detail ? ` — ${answer.detail}` : ""}`);
      } catch (e) {
        message.textContent = refusal(e);
        recorded([ident(run.run_id), `: ${action} refused: ${refusal(e)}`], true);
      }
    });
  };
  const submit = h("button", { class: "primary", type: "submit" }, gate ? "Approve and resume" : "Resume");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (submit.disabled) return;
    const input = changed();
    const given = Object.keys(input).length ? ` with ${Object.keys(input).join(", ")}` : " with no change to memory";
    if (gate) send(submit, "approve", { by: by.value.trim(), input, expected_seq: seen }, `Approved by ${by.value.trim()}${given}`);
    else send(submit, "resume", { input }, `Resumed${given}`);
  });
  const buttons = h("div", { class: "row" }, submit,
    gate ? h("button", { class: "danger reject", type: "button", onclick: (e) =>
      send(e.currentTarget, "reject", { by: by.value.trim(), reason: reason.value.trim(), expected_seq: seen }, `Rejected by ${by.value.trim()}`) }, "Reject") : "",
    h("button", { class: "danger", type: "button", onclick: (e) => send(e.currentTarget, "cancel", { reason: "cancelled from the dashboard" }, "Cancelled") }, "Cancel run"));
  form.append(about, rows, gate ? h("div", { class: "row" }, by, reason) : "", buttons, message);
  // What the run's pause view carries (a listing's row too, unless it left values out):
  // the keys the gated node reads with memory's values, what it still lacks, its
  // description and criteria.
  const paused = run.paused || {};
  const reads = paused.reads || [];
  const values = paused.values || {};
  for (const key of reads) addRow(key, Object.hasOwn(values, key) ? fieldText(values[key]) : "", true);
  const criteria = paused.success_criteria || [];
  const missing = paused.waiting_for || [];
  fill(about,
    paused.description ? h("p", {}, iso(paused.description)) : "",
    criteria.length ? h("div", {}, h("b", {}, "Success criteria: "), h("ul", { class: "criteria" }, ...criteria.map((c) => h("li", {}, iso(typeof c === "string" ? c : JSON.stringify(c)))))) : "",
    gate ? h("p", { class: "waiting" }, missing.length ? ["waiting for: ", idents(missing)] : "the node has all it reads") : "");
  if (!reads.length) addRow();
  return form;
}

// ---------------------------------------------------------------- router

// The live stream of the page shown (each page opens one); the router closes it.
let pageStream = null;

function closeStreams() {
  if (pageStream) { pageStream.close(); pageStream = null; }
  clearTimeout(ownerTimer);
  ownerTimer = null;
}

async function route() {
  closeStreams();
  const path = location.pathname.slice(ROOT.length) || "/";
  try {
    if (path.startsWith("/runs/")) await runPage(decodeURIComponent(path.slice(6)));
    else if (path === "/approvals") await approvalsPage();
    else await runsPage();
  } catch (e) {
    fill(main, h("p", { class: "error" }, refusal(e)));
  }
}

// The page scripts load after this one: route once the document, with them, is parsed.
document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromHash();
  renderTokenState();
  route();
});
