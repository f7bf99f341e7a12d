// The magistrate dashboard: the runs table (filters, cursor pages, live updates), the
// start form, and the approvals page. Uses the helpers of app.js, which loads first.
"use strict";

// ---------------------------------------------------------------- runs page

const FILTERS = ["status", "quality", "graph", "created_after", "created_before", "limit", "cursor"];

function toLocalInput(seconds) {
  if (!seconds) return "";
  const d = new Date(Number(seconds) * 1000);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

async function runsPage() {
  const params = new URLSearchParams(location.search);
  const graphs = await api("/api/graphs").catch(() => ({ graphs: [] }));
  const select = (name, options) => h("select", { name },
    h("option", { value: "" }, "any"),
    options.map((o) => h("option", { value: o, selected: params.get(name) === o }, o)));
  const form = h("form", { class: "filters", id: "filters" },
    h("label", {}, "status", select("status", ["new", "running", "paused", "cancelled", "completed", "failed"])),
    h("label", {}, "quality", select("quality", ["clean", "degraded", "failed"])),
    h("label", {}, "graph", h("input", { name: "graph", list: "graph-names", value: params.get("graph") || "", size: 12 })),
    h("datalist", { id: "graph-names" }, graphs.graphs.map((g) => h("option", { value: g.name }))),
    h("label", {}, "created after", h("input", { name: "created_after", type: "datetime-local", value: toLocalInput(params.get("created_after")) })),
    h("label", {}, "created before", h("input", { name: "created_before", type: "datetime-local", value: toLocalInput(params.get("created_before")) })),
    h("label", {}, "per page", select("limit", ["10", "25", "50", "100"])),
    h("button", { type: "submit", class: "primary" }, "Filter"));
  const body = h("tbody");
  const pager = h("div", { class: "row small" });
  const startBox = graphs.graphs.length ? startForm(graphs.graphs) : "";
  fill(main, 
    h("h1", {}, "Runs"),
    h("div", { class: "card" }, form),
    h("div", { class: "card" },
      // A narrow window scrolls the table, not the page.
      h("div", { class: "scroll-x" }, h("table", { id: "runs" },
        h("thead", {}, h("tr", {}, ["run", "graph", "status", "owner", "quality", "waiting for", "created", "updated", "events"].map((t) => h("th", {}, t)))),
        body)),
      pager),
    startBox);

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    for (const [key, value] of new FormData(form)) {
      if (!value) continue;
      next.set(key, key.startsWith("created_") ? String(new Date(value).getTime() / 1000) : value);
    }
    history.pushState(null, "", `${location.pathname}?${next}`);
    load();
  });

  let loads = 0;  // a response to a load that a later one superseded is dropped
  async function load() {
    const query = new URLSearchParams();
    const current = new URLSearchParams(location.search);
    for (const key of FILTERS) if (current.get(key)) query.set(key, current.get(key));
    const mine = ++loads;
    let data;
    try { data = await api(`/api/runs?${query}`); }
    catch (e) {
      if (mine === loads) fill(body, h("tr", {}, h("td", { colspan: 9, class: "error" }, refusal(e))));
      return;
    }
    if (mine !== loads) return;
    fill(body, ...data.runs.map((r) => h("tr", { "data-run": r.run_id },
      h("td", { class: "mono" }, h("a", { href: `${ROOT}/runs/${encodeURIComponent(r.run_id)}` }, ident(r.run_id)),
        r.origin ? h("span", { class: "small muted fork" }, " fork of ",
          h("a", { href: `${ROOT}/runs/${encodeURIComponent(r.origin)}` }, ident(r.origin))) : ""),
      h("td", {}, r.graph_id ? ident(r.graph_id) : ""),
      h("td", { class: "tight" }, badge("s", r.status)),
      ownerCell(r),
      h("td", { class: "tight" }, badge("q", r.quality)),
      h("td", { class: "small" }, r.paused ? [ident(r.paused.node_id || ""), ` (${r.paused.reason})`,
        r.paused.waiting_for.length ? [": ", idents(r.paused.waiting_for)] : ""] : ""),
      h("td", { class: "small" }, fmtTime(r.created)),
      h("td", { class: "small" }, fmtTime(r.updated)),
      h("td", { class: "tight" }, fmtInt(r.last_seq)))));
    if (!data.runs.length) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No runs match.")));
    recheckOwners(data.runs, load, body);
    // Older pages follow the listing's cursor; each is a history entry, so "newer" (and
    // the browser's back button) return to the page before, and a page's URL reloads it.
    const depth = history.state?.depth || 0;
    const older = () => {
      current.set("cursor", data.next_cursor);
      history.pushState({ depth: depth + 1 }, "", `${location.pathname}?${current}`);
      load();
    };
    const newest = () => {
      current.delete("cursor");
      history.pushState({ depth: 0 }, "", `${location.pathname}?${current}`);
      load();
    };
    fill(pager,
      current.get("cursor") ? h("button", { id: "newer", onclick: () => (depth > 0 ? history.back() : newest()) }, "← newer") : "",
      current.get("cursor") ? h("button", { id: "newest", onclick: newest }, "newest") : "",
      data.next_cursor !== null ? h("button", { id: "older", onclick: older }, "older →") : "");
  }
  await load();
  // Every change of a run reloads the page of runs, at most every 250 ms; after a drop of
  // the stream (a restart) it reloads at once: what changed meanwhile sent no message.
  const refresh = coalesce(load, 250);
  pageStream = openStream(() => "/api/stream", (type) => { if (type === "run") refresh(); },
    (again) => { if (again) refresh(); });
  window.onpopstate = () => route();
}

function startForm(graphs) {
  const graph = h("select", { name: "graph" }, graphs.map((g) => h("option", { value: g.name }, g.name)));
  const rows = inputRows([]);
  const message = h("div", { class: "error" });
  const start = h("button", { class: "primary", type: "submit" }, "Start");
  // One run per click: the button is disabled while the run is being started.
  return h("div", { class: "card" }, h("h2", {}, "Start a run"),
    h("form", { onsubmit: (e) => {
      e.preventDefault();
      if (start.disabled) return;
      message.textContent = "";
      once(start, async () => {
        try {
          const ref = await api("/api/runs", { body: { graph: graph.value, input: rows.values() } });
          location.href = `${ROOT}/runs/${encodeURIComponent(ref.run_id)}`;
        } catch (err) { message.textContent = refusal(err); }
      });
    } }, h("label", {}, "graph ", graph), rows, start, message));
}

// ---------------------------------------------------------------- approvals page

const APPROVALS_PAGE = 50; // paused runs per approvals page

async function approvalsPage() {
  const list = h("div", { id: "approvals" });
  const pager = h("div", { class: "row small", id: "approvals-pager" });
  const failure = h("p", { class: "error", id: "approvals-error" });
  fill(main, h("h1", {}, "Waiting for approval"), failure, list, pager);
  // Newest first, APPROVALS_PAGE at a time; older pages follow the listing's cursor.
  const cursors = [null]; // the cursor of each page shown so far (null: the newest)
  // Every change of any run reloads the list: the card of a run that did not change is
  // kept as it is, with what was typed into it and its focus.
  let cards = new Map(); // run id -> { seq, card }
  let loads = 0; // an answer to a load that a later one superseded is dropped
  async function load() {
    const mine = ++loads;
    const query = new URLSearchParams({ status: "paused", limit: APPROVALS_PAGE });
    const cursor = cursors.at(-1);
    if (cursor) query.set("cursor", cursor);
    let data;
    try { data = await api(`/api/runs?${query}`); }
    catch (e) {
      // The cards shown stay (with what was typed); the page says they may be stale.
      if (mine === loads) failure.textContent = `Could not read the paused runs: ${refusal(e)}`;
      return;
    }
    if (mine !== loads) return;
    failure.textContent = "";
    const kept = cards;
    cards = new Map(data.runs.map((r) => {
      const same = kept.get(r.run_id);
      return [r.run_id, same?.seq === r.last_seq ? same : { seq: r.last_seq, card: approvalCard(r, load) }];
    }));
    place(list, [...cards.values()].map((c) => c.card));
    if (!data.runs.length) list.append(h("p", { class: "muted" }, cursors.length > 1 ? "No older paused runs." : "No paused runs."));
    const go = (change) => () => { change(); load(); };
    fill(pager,
      cursors.length > 1 ? h("button", { id: "approvals-newer", onclick: go(() => cursors.pop()) }, "← newer") : "",
      data.next_cursor !== null ? h("button", { id: "approvals-older", onclick: go(() => cursors.push(data.next_cursor)) }, "older →") : "",
      h("span", { class: "muted" }, `page ${cursors.length} · ${APPROVALS_PAGE} a page, newest first`));
  }
  await load();
  const reload = coalesce(load, 250);
  pageStream = openStream(() => "/api/stream", (type) => { if (type === "run") reload(); },
    (again) => { if (again) reload(); });
}

// A card's form is drawn from the listing's row, unless the row leaves values out or
// shortens the node's description or criteria (too large for a listing: values_omitted,
// shortened): then from the run's detail, which has them whole, so a field is never
// prefilled with less than memory holds and the approver reads the node's texts whole.
function approvalCard(r, onDone) {
  const href = `${ROOT}/runs/${encodeURIComponent(r.run_id)}`;
  const omitted = [...(r.paused?.values_omitted || []), ...(r.paused?.shortened || [])];
  const slot = h("div", { class: "form-slot" });
  if (!omitted.length) slot.append(approveForm(r, onDone));
  else {
    slot.append(h("p", { class: "muted small" }, "reading ", idents(omitted), " whole…"));
    api(`/api/runs/${encodeURIComponent(r.run_id)}`).then(
      (detail) => fill(slot, detail.summary.status === "paused" ? approveForm(detail.summary, onDone)
        : h("p", { class: "muted small" }, `The run is ${detail.summary.status} now.`)),
      (e) => fill(slot, h("p", { class: "error" }, `Could not read the run's values: ${refusal(e)}; `,
        h("a", { href }, "open the run"), " to decide.")));
  }
  return h("div", { class: "card", "data-run": r.run_id },
    h("h2", {}, h("a", { href, class: "mono" }, ident(r.run_id)), " ",
      h("span", { class: "muted" }, r.graph_id ? ident(r.graph_id) : "")),
    h("p", { class: "small" }, `Paused (${r.paused?.reason || "?"}) before node `, h("b", {}, ident(r.paused?.node_id || "?")),
      r.paused?.waiting_for?.length ? ["; waiting for ", idents(r.paused.waiting_for)] : "",
      ` · updated ${fmtTime(r.updated)}`),
    slot);
}

// Show ``elements`` in ``parent``, in order, moving only what is out of place: an element
// that stays where it was keeps its focus and what was typed into it.
function place(parent, elements) {
  const wanted = new Set(elements);
  for (const child of [...parent.children]) if (!wanted.has(child)) child.remove();
  elements.forEach((el, i) => { if (parent.children[i] !== el) parent.insertBefore(el, parent.children[i] || null); });
}
