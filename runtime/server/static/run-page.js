// The magistrate dashboard: a run's page (verdicts, timeline, time travel, fork, replay,
// actions; its graph is drawn by graph.js). Uses the helpers of app.js, which loads first.
"use strict";

const PAGE = 200; // events per timeline page

// ---------------------------------------------------------------- run page: summaries

const CATEGORIES = {
  "turns": "llm.turn", "tool calls": "tool.result", "verdicts": "judge.verdict,node.stalled",
  "memory writes": "memory.written,output.set", "edges": "edge.taken,branches.",
  "pauses": "run.paused,run.resumed,input.injected,run.cancelled", "nodes": "node.", "run": "run.",
};

// The node an event is about, its id cut to a timeline cell (the event, picked, has it whole).
function nodeOf(ev) {
  const body = ev.body;
  const id = (x) => ident(short(x, 60));
  if (body.node_id) return id(body.node_id);
  return ev.type === "edge.taken" ? [id(body.source), " → ", id(body.target)] : body.source ? id(body.source) : "";
}

// A value as text cut to n characters (never between the halves of a surrogate pair).
function short(value, n = 140) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (!text || text.length <= n) return text || "";
  const end = /[\uD800-\uDBFF]/.test(text[n - 1]) ? n - 1 : n;
  return text.slice(0, end) + "…";
}
// A value in a row: cut, and isolated (its direction marks end with it).
const cut = (value) => iso(short(value));

function describe(ev) {
  const body = ev.body;
  switch (ev.type) {
    case "run.started": return ["started with input ", cut(body.input)];
    case "node.started": return `visit ${body.visit}${body.attempt > 1 ? `, attempt ${body.attempt}` : ""}`;
    case "llm.turn": return [`turn ${body.iteration}: `, body.text ? cut(body.text) : "(no text)",
      body.tool_calls.length ? [" · calls ", idents(body.tool_calls.map((c) => c.name))] : "", ` · ${body.input_tokens}/${body.output_tokens} tokens`];
    case "tool.result": return [ident(body.name), " → ", cut(body.content), body.is_error ? " (error)" : ""];
    case "judge.verdict": if (body.level === "bail_out") return `tool turn ${body.iteration}: not judged (RETRY, bail_out)`;
      return [`${body.action.toUpperCase()} (${body.level}${body.confidence !== null ? `, ${body.confidence}` : ""})`, body.feedback ? [": ", cut(body.feedback)] : ""];
    case "node.stalled": return `stall warning at turn ${body.iteration}`;
    case "conversation.message": return [`${body.role} (${body.kind}): `, cut(body.content)];
    case "conversation.compacted": return [`compacted ${plural(body.upto, "entry", "entries")}: `, cut(body.summary)];
    case "run.forked": return ["forked from ", ident(body.source_run_id), ` at seq ${body.source_seq}`];
    case "graph.replaced": return ["moved to graph ", ident(body.graph.id ?? "?"), ` (${body.graph_hash.slice(0, 12)})${body.forced ? `, forced past ${plural(body.divergences, "divergence")}` : ""}`];
    case "run.pause_requested": return ["pause requested", body.by ? [" by ", iso(body.by)] : ""];
    case "output.set": return ["output ", ident(body.key), " = ", cut(body.value)];
    case "memory.written": return [ident(body.key), ` ${body.op === "replace" ? "=" : body.op} `, cut(body.value)];
    case "node.failed": return [`${body.error_type}: `, cut(body.error), body.will_retry ? " (will retry)" : ""];
    case "edge.taken": return [body.condition, body.reason ? [": ", cut(body.reason)] : ""];
    case "run.paused": return `paused (${body.reason})`;
    case "input.injected": return ["input ", cut(body.data)];
    case "run.cancelled": return ["cancelled", body.reason ? [": ", cut(body.reason)] : ""];
    case "run.finished": return [`${body.status}, quality ${body.quality}`, body.error ? [": ", cut(body.error)] : ""];
    default: return cut(Object.fromEntries(Object.entries(body).filter(([k]) => k !== "type")));
  }
}

function tagClass(type) {
  const head = type.split(".")[0];
  return { llm: "t-llm", tool: "t-tool", judge: "t-judge", memory: "t-memory", output: "t-memory", edge: "t-edge", run: "t-run" }[head] || "";
}

// Judged verdicts and tool turns (turns that called tools: nobody judged them) apart; the
// strip shows the newest of both.
function verdictCount(node) {
  const tools = node.tool_turns ? `, ${plural(node.tool_turns, "tool turn")}` : "";
  const shown = node.total_verdicts + (node.tool_turns || 0) > node.verdicts.length ? ` (the last ${fmtInt(node.verdicts.length)} shown)` : "";
  return `${plural(node.total_verdicts, "verdict")}${tools}${shown}`;
}

function verdictStrips(detail) {
  if (!detail.llm_nodes.length) return h("p", { class: "muted" }, "No LLM nodes.");
  return detail.llm_nodes.map((node) => h("div", { class: "strip-block", "data-node": node.node_id },
    h("h2", {}, ident(node.node_id), " ", h("span", { class: "muted small" },
      verdictCount(node))),
    h("div", { class: "strip" }, node.verdicts.map((v) => v.level === "bail_out"
      // A turn that called tools is not judged: shown as a tool turn, not as a RETRY.
      ? h("span", { class: "verdict v-tool", title: "called tools; not judged", "data-action": "TOOL" },
        h("b", {}, "TOOL"), ` turn #${v.iteration}`)
      : h("span", {
        class: `verdict v-${v.action.toLowerCase()}`, title: v.feedback || v.error || "",
        "data-action": v.action.toUpperCase() },
        h("b", {}, v.action.toUpperCase()), ` ${v.level}`, v.confidence !== null ? ` ${v.confidence}` : "", ` #${v.iteration}`))),
    node.verdicts.filter((v) => v.feedback || v.error).map((v) => h("div", { class: "feedback" },
      h("span", { class: "muted" }, `turn ${v.iteration} ${v.action.toUpperCase()}: `), iso(v.feedback || v.error))),
    node.stalls.map((st) => h("div", { class: "stall" }, `⚠ stall at turn ${st.iteration}: the same tool calls turn after turn (seq ${st.seq})`))));
}

// The checks that did not run (judge failures): why a completed run is not "clean".
function judgeFailures(failures) {
  if (!failures) return "";
  const kinds = Object.entries(failures.by_kind).map(([kind, n]) => `${n} ${kind}`).join(", ");
  return h("div", { id: "judge-failures", class: "judge-failures" },
    h("b", {}, "Judge failures: "), h("span", { "data-total": failures.total }, `${fmtInt(failures.total)} (${kinds})`),
    h("span", { class: "muted small" }, " checks that did not run"),
    h("ul", { class: "small" }, ...failures.reasons.map((f) => h("li", { "data-kind": f.kind, "data-seq": f.seq },
      h("span", { class: "muted" }, `seq ${f.seq} · ${f.kind}`, f.node_id ? [" at ", ident(f.node_id)] : "", ": "), iso(f.reason)))));
}

function chainText(v) {
  return v.ok ? `verified: ${plural(v.checked, "event")} intact`
    : `chain broken at seq ${v.broken_at ?? "?"}: ${v.reason} (${plural(v.checked, "event")} check${v.checked === 1 ? "s" : ""} out before it)`;
}

// The whole-chain check (verify) is read once per page and again when the run ends; each
// refresh's detail carries the check of what it read (the snapshot's tail), which marks a
// break in the events that came since.
function chainView(full, read) {
  if (!read.ok) return { ok: false, text: `chain broken at seq ${read.broken_at ?? "?"}: ${read.reason}` };
  return { ok: full.ok, text: chainText(full) };
}

// ---------------------------------------------------------------- replay

// Replay: the run again, in memory, against a graph (the recorded one or one this server
// has): recorded model answers, tool results and function outputs are served from the
// log, every decision is made again, nothing is written (docs/replay.md).
function replayCard(enc) {
  const choice = h("select", { id: "replay-graph", "aria-label": "graph to replay against" }, h("option", { value: "" }, "the recorded graph"));
  api("/api/graphs").then((list) => list.graphs.forEach((g) =>
    choice.append(h("option", { value: g.name }, reveal(g.name))))).catch(() => {});
  const out = h("div", { id: "replay-report", class: "small" });
  const button = h("button", { id: "replay", onclick: (e) => once(e.currentTarget, async () => {
    fill(out, h("span", { class: "muted" }, "replaying…"));
    try {
      const report = await api(`/api/runs/${enc}/replay`, { body: choice.value ? { graph: choice.value } : {} });
      fill(out, replayReport(report));
    } catch (e) {
      fill(out, h("span", { class: "error" }, refusal(e)));
    }
  }) }, "Replay");
  return h("div", { class: "card", id: "replay-card" }, h("h2", {}, "Replay"),
    h("p", { class: "small muted" }, "Run it again in memory against a graph: what would today's graph decide otherwise? Model answers, tool results and function outputs come from the log; nothing is called or written."),
    h("div", { class: "row small" }, choice, button), out);
}

function replayReport(r) {
  const count = r.divergences.length;
  const served = `graph ${r.graph_id}; ${plural(r.recorded_events, "event")} recorded, ${fmtInt(r.replayed_events)} replayed, ${plural(r.model_calls, "model answer")} served from the log`;
  return [
    h("p", { id: "replay-verdict", class: r.equal ? "chain-ok" : "chain-bad" },
      r.equal ? "No divergence" : (count ? `${count} divergence${count === 1 ? "" : "s"}` : "Not equal"),
      h("span", { class: "muted" }, ` (${served})`)),
    count ? h("ul", { id: "replay-divergences" }, ...r.divergences.map((d) =>
      h("li", { "data-seq": String(d.seq) }, h("span", { class: "mono" }, `seq ${d.seq} · ${d.kind}: `), d.reason))) : "",
    r.stopped ? h("p", { id: "replay-stopped", class: "error" }, `stopped: ${r.stopped}`) : "",
    r.warnings.length ? h("ul", { id: "replay-warnings", class: "muted" }, ...r.warnings.map((w) => h("li", {}, `warning: ${w}`))) : "",
    r.not_redecided.length ? h("p", { class: "muted" }, `served from the log, not decided again (imports not allowed here): ${r.not_redecided.join(", ")}`) : "",
    r.live_calls ? h("p", { class: "muted" }, `${fmtInt(r.live_calls)} live model calls (rejudge)`) : "",
  ];
}

// ---------------------------------------------------------------- run page

// Why a started node is not running, by the run's status (as `magistrate state` says it).
const STOPPED_BY = { cancelled: "the run was cancelled", paused: "the run paused" };

// Where the run is: "at node X" while something executes it. A run nothing executes (it
// was cancelled, it paused, or it is running with no live claim: waiting for a worker)
// names its started, unfinished nodes "interrupted", with why (a resume runs them again),
// as `magistrate state` does, and the nodes due next "next" (a pause's own node among
// them, which the actions card names).
function whereLine(detail, sum) {
  if (!detail.current.length || ["completed", "failed"].includes(sum.status)) return "";
  if (sum.status === "running" && sum.ownership !== "waiting") {
    return h("p", {}, "at node ", h("b", { id: "current" }, idents(detail.current)));
  }
  const pausedAt = sum.status === "paused" ? sum.paused?.node_id : null;
  const started = (detail.running || []).filter((n) => n !== pausedAt);
  const next = detail.current.filter((n) => !started.includes(n));
  return h("p", { id: "where" },
    started.length ? h("span", { id: "interrupted" }, "interrupted: ", idents(started),
      ` (${STOPPED_BY[sum.status] || "waiting for a worker"})`) : "",
    started.length && next.length ? " · " : "",
    next.length ? h("span", {}, "next: ", h("b", { id: "current" }, idents(next))) : "");
}

async function runPage(runId) {
  const enc = encodeURIComponent(runId);
  const head = h("div", { class: "card", id: "run-head" });
  const graphBox = h("div", { class: "card grow", id: "graph" });
  const verdictBox = h("div", { class: "card grow", id: "verdicts" });
  const actions = h("div", { class: "card", id: "actions" });
  const travel = h("div", { class: "card", id: "travel" }, h("h2", {}, "Time travel"),
    h("p", { class: "muted small" }, "Pick an event in the timeline to see the state after it."));
  const nodeFilter = h("select", { id: "node-filter", "aria-label": "node" }, h("option", { value: "" }, "all nodes"));
  const typeBoxes = Object.entries(CATEGORIES).map(([label, types]) =>
    h("label", { class: "small" }, h("input", { type: "checkbox", value: types, checked: true, "data-category": label }), ` ${label} `));
  const rows = h("tbody");
  const more = h("div", { class: "small muted" });
  const scroller = h("div", { class: "timeline", id: "timeline" },
    h("table", {}, h("thead", {}, h("tr", {}, ["seq", "time", "type", "node", "what"].map((t) => h("th", {}, t)))), rows));
  // Shown when a read of the run fails: what the page shows is then as of its last read.
  const staleNote = h("p", { class: "error", id: "stale", role: "alert" });
  let readAt = null; // when the run was last read
  fill(main,
    h("h1", {}, "Run ", h("span", { class: "mono" }, ident(runId))), staleNote, head, actions,
    h("div", { class: "row" }, graphBox, verdictBox),
    h("div", { class: "row" },
      h("div", { class: "card grow" }, h("h2", {}, "Timeline"),
        h("div", { class: "filters row small" }, nodeFilter, typeBoxes), scroller, more),
      h("div", { class: "grow travel" }, travel, replayCard(enc))));

  let detail = null;
  let timelineAfter = 0; // the seq the next page starts after (null: no more stored)
  let lastSeen = 0; // the newest seq known to this page
  let loading = false;

  const wantedTypes = () => {
    const all = typeBoxes.map((l) => l.querySelector("input"));
    return all.every((b) => b.checked) ? "" : all.filter((b) => b.checked).map((b) => b.value).join(",");
  };
  const matches = (ev) => {
    const node = nodeFilter.value;
    if (node && ev.body.node_id !== node && ev.body.source !== node && ev.body.target !== node) return false;
    const types = wantedTypes();
    if (!types) return true;
    return types.split(",").some((t) => (t.endsWith(".") ? ev.type.startsWith(t) : ev.type === t));
  };
  const addRow = (ev) => {
    // A row is picked by a click, or from the keyboard (Tab to it, then Enter or Space).
    rows.append(h("tr", { "data-seq": ev.seq, "data-type": ev.type, tabindex: 0, onclick: (e) => pick(ev, e.currentTarget),
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(ev, e.currentTarget); } } },
      h("td", { class: "mono tight" }, ev.seq),
      h("td", { class: "small tight" }, new Date(ev.ts * 1000).toLocaleTimeString([], { hour12: false })),
      h("td", { class: `mono tight ${tagClass(ev.type)}` }, ev.type),
      h("td", { class: "small" }, nodeOf(ev)),
      h("td", {}, describe(ev))));
  };

  // A filter change while a page is loading makes that page stale: it is dropped and the
  // first page of the new filter is loaded instead.
  let generation = 0;
  async function loadPage() {
    if (loading || timelineAfter === null) return;
    loading = true;
    const mine = generation;
    let stale = false;
    let behind = false;
    try {
      const q = new URLSearchParams({ after: timelineAfter, limit: PAGE });
      if (nodeFilter.value) q.set("node", nodeFilter.value);
      if (wantedTypes()) q.set("type", wantedTypes());
      let page;
      try { page = await api(`/api/runs/${enc}/events?${q}`); }
      catch (e) {
        if (mine === generation) more.textContent = `Could not read more events: ${refusal(e)}; scroll to try again.`;
        return;
      }
      stale = mine !== generation;
      if (stale) return;
      page.events.forEach(addRow);
      // The page reads the log as it was; the live events that came meanwhile were not
      // added (a page was due): the next page reads them, after what this one covered.
      const covered = Math.max(page.last_seq, page.events.at(-1)?.seq ?? 0);
      behind = page.next_after === null && lastSeen > covered;
      lastSeen = Math.max(lastSeen, covered);
      timelineAfter = behind ? covered : page.next_after;
      more.textContent = timelineAfter === null ? `${plural(rows.children.length, "event")} shown` : `${plural(rows.children.length, "event")} shown; scroll for more`;
    } finally {
      loading = false;
      // A short page with more to read (filters that match few events): read on.
      if (stale || behind || (timelineAfter !== null && rows.children.length < PAGE)) loadPage();
    }
  }
  scroller.addEventListener("scroll", () => {
    if (scroller.scrollTop + scroller.clientHeight > scroller.scrollHeight - 200) loadPage();
  });
  const resetTimeline = () => { generation += 1; fill(rows); timelineAfter = 0; loadPage(); };
  nodeFilter.addEventListener("change", resetTimeline);
  typeBoxes.forEach((l) => l.addEventListener("change", resetTimeline));

  // An answer to a request a later one superseded (a pick, a refresh) is dropped: answers
  // can arrive out of order, and the older one must not overwrite the newer.
  let picks = 0;
  async function pick(ev, row) {
    rows.querySelectorAll("tr.selected").forEach((r) => r.classList.remove("selected"));
    row.classList.add("selected");
    const mine = ++picks;
    const heading = () => h("h2", {}, `State after seq ${ev.seq} `, h("span", { class: "mono small" }, ev.type));
    let state;
    try { state = await api(`/api/runs/${enc}/state?at=${ev.seq}`); }
    catch (e) {
      if (mine === picks) fill(travel, heading(), h("p", { class: "error" }, `Could not read it: ${refusal(e)}`));
      return;
    }
    if (mine !== picks) return;
    const editor = h("textarea", { rows: 5, class: "wide", id: "fork-input" }, JSON.stringify(state.memory, null, 2));
    const message = h("div", { class: "small" });
    const visits = Object.entries(state.visit_counts).map(([k, n]) => [ident(k), `×${n}`]);
    fill(travel, heading(),
      h("div", { class: "kv small", id: "state-at" },
        h("span", { class: "muted" }, "status"), h("span", {}, state.status),
        h("span", { class: "muted" }, "path"), h("span", {}, pathText(state.path)),
        h("span", { class: "muted" }, "next"), h("span", {}, state.pending.length ? idents(state.pending) : "—"),
        h("span", { class: "muted" }, "visits"), h("span", {}, visits.length ? visits.flatMap((x, i) => (i ? [", ", x] : [x])) : "—")),
      // The event itself, whole: the timeline's row cuts long text short.
      h("h2", {}, "event"), h("pre", { id: "event-body" }, JSON.stringify(ev.body, null, 2)),
      h("h2", {}, "memory"), h("pre", { id: "state-memory" }, JSON.stringify(state.memory, null, 2)),
      Object.keys(state.outputs).length ? [h("h2", {}, "node outputs so far"), h("pre", {}, JSON.stringify(state.outputs, null, 2))] : "",
      h("h2", {}, "Fork from here"),
      h("p", { class: "small muted" }, "A new run whose log starts as a copy of the first events up to this one; the input below is injected into it."),
      h("label", { class: "small", for: "fork-input" }, "input to inject (JSON object)"), editor,
      h("button", { class: "primary", id: "fork", onclick: (click) => once(click.currentTarget, async () => {
        message.textContent = "";
        let input;
        try { input = JSON.parse(editor.value || "{}", exact); } catch (e) { message.textContent = `not JSON: ${e.message}`; return; }
        const changed = Object.fromEntries(Object.entries(input).filter(([k, v]) => JSON.stringify(own(state.memory, k)) !== JSON.stringify(v)));
        try {
          const ref = await api(`/api/runs/${enc}/fork`, { body: { at_seq: ev.seq, input: changed } });
          fill(message, "forked: ", h("a", { href: `${ROOT}/runs/${encodeURIComponent(ref.run_id)}` }, ident(ref.run_id)));
        } catch (e) { message.textContent = refusal(e); }
      }) }, "Fork run"), message);
  }

  let refreshes = 0;
  let verify = null;
  let verifiedAs = null;
  let drawn = null; // what the actions card was drawn for: kept (and what is typed in it) while the same
  async function refresh() {
    const mine = ++refreshes;
    const fresh = await api(`/api/runs/${enc}`);
    const status = fresh.summary.status;
    if (verify === null || (status !== verifiedAs && ["completed", "failed", "cancelled"].includes(status))) {
      verify = await api(`/api/runs/${enc}/verify`);
      verifiedAs = status;
    }
    if (mine !== refreshes) return;
    staleNote.textContent = "";
    readAt = new Date();
    detail = fresh;
    const sum = detail.summary;
    const chain = chainView(verify, detail.chain);
    recheckOwners([sum], refreshSoon, head);
    fill(head,
      h("div", { class: "row" },
        h("span", {}, badge("s", sum.status)), h("span", {}, badge("q", sum.quality)),
        sum.ownership === "unclaimed" ? "" : h("span", { id: "owner", class: `small o-${sum.ownership}` }, sum.ownership === "claimed" ? "owner " : "", h("b", {}, ownerText(sum))),
        h("span", {}, "graph ", h("b", {}, ident(sum.graph_id || "?"))),
        h("span", { class: "muted", id: "run-events", "data-last-seq": sum.last_seq }, `${plural(sum.last_seq, "event")} · started ${fmtTime(sum.created)} · updated ${fmtTime(sum.updated)}`),
        sum.forked_from ? h("span", { id: "forked", class: "small" }, "fork of ",
          h("a", { href: `${ROOT}/runs/${encodeURIComponent(sum.forked_from.run_id)}`, class: "mono" }, ident(sum.forked_from.run_id)),
          ` at seq ${fmtInt(sum.forked_from.seq)}`) : "",
        h("span", { id: "chain", class: chain.ok ? "chain-ok" : "chain-bad" }, chain.text)),
      whereLine(detail, sum),
      detail.goal ? h("p", { class: "small" }, h("b", {}, "Goal: "), iso(detail.goal.description),
        detail.goal.success_criteria?.length ? h("span", { class: "muted" }, " (success: ", detail.goal.success_criteria.map((c, i) => [i ? "; " : "", iso(c)]), ")") : "") : "",
      judgeFailures(detail.judge_failures),
      detail.goal_outcome ? h("div", { id: "goal-outcome" }, h("b", {}, "Goal outcome"), h("pre", {}, JSON.stringify(detail.goal_outcome, null, 2))) : "",
      sum.status === "running" && sum.unrunnable?.length ? h("ul", { id: "unrunnable", class: "error" },
        ...sum.unrunnable.map((reason) => h("li", {}, "a worker cannot execute it: ", iso(reason)))) : "",
      sum.error ? h("p", { class: "error" }, iso(sum.error)) : "",
      ["completed", "failed"].includes(sum.status) ? h("div", {}, h("b", {}, "Final memory"), h("pre", { id: "memory" }, JSON.stringify(detail.memory, null, 2))) : "");
    const svg = drawGraph(detail, new Set(detail.edges_taken));
    fill(graphBox, h("h2", {}, "Graph"), svg,
      h("p", { class: "small muted" }, "path: ", pathText(detail.path)));
    if (svg instanceof SVGElement) fitLabels(svg);
    fill(verdictBox, h("h2", {}, "Verdicts"), verdictStrips(detail));
    const nodes = (detail.graph?.nodes || []).map((n) => n.id);
    if (nodeFilter.options.length === 1) nodes.forEach((n) => nodeFilter.append(h("option", { value: n }, reveal(n))));
    // The card is drawn again only when the run moved on: a busy run's refreshes must not
    // swap a button under a click, nor a paused run's wipe what is typed in its form.
    const state = JSON.stringify([sum.status, sum.status === "paused" ? sum.last_seq : null]);
    if (state === drawn) return;
    drawn = state;
    fill(actions, h("h2", {}, "Actions"));
    const act = (action, label, cls) => h("button", { class: cls, onclick: (e) => once(e.currentTarget, async () => {
      // A refusal goes to the top of the page, where it stays.
      try { await api(`/api/runs/${enc}/${action}`, { body: {} }); }
      catch (error) { recorded([ident(runId), `: ${label} refused: ${refusal(error)}`], true); }
      refreshSoon();
    }) }, label);
    if (sum.status === "paused") {
      actions.append(h("p", { class: "small" }, `Paused (${sum.paused?.reason || "?"}) before `, h("b", {}, ident(sum.paused?.node_id || "?")),
        sum.paused?.waiting_for?.length ? [", waiting for ", idents(sum.paused.waiting_for)] : ""), approveForm(sum, refreshSoon));
    } else if (sum.status === "running") {
      actions.append(act("pause", "Pause"), " ", act("cancel", "Cancel", "danger"));
    } else if (sum.status === "cancelled") {
      actions.append(act("resume", "Resume"));
    } else {
      actions.append(h("span", { class: "muted small" }, `The run is ${sum.status}.`));
    }
  }
  // Each event read live asks for a refresh: at most one every 150 ms, however busy the run.
  // A failed one says so above the head, which then shows the run as of its last read, and
  // is tried again 3 s later while the page is shown.
  const refreshSoon = coalesce(() => refresh().catch((e) => {
    staleNote.textContent = `Could not read the run again: ${refusal(e)}. What is shown is as read at ${readAt?.toLocaleTimeString() ?? "?"}; trying again.`;
    setTimeout(() => { if (main.contains(head)) refreshSoon(); }, 3000);
  }), 150);

  await refresh();
  await loadPage();
  pageStream = openStream(() => `/api/runs/${enc}/stream?after=${lastSeen}`, (type, data) => {
    if (type !== "event") return;
    const ev = parseJSON(data);
    if (ev.seq <= lastSeen) return;
    lastSeen = ev.seq;
    // Live rows join the table only once every stored page is shown, so order holds.
    if (timelineAfter === null && matches(ev)) addRow(ev);
    refreshSoon();
  }, (again) => { if (again) refreshSoon(); });
}
