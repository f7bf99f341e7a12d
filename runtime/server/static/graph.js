// The magistrate dashboard: a run's graph as SVG, its nodes in layers by distance from the
// entry, the edges taken and the current node marked. Uses the helpers of app.js, which
// loads first; run-page.js draws it.
"use strict";

function s(tag, attrs, ...children) {
  return h(tag, { ...attrs, svg: true }, ...children);
}

// ---------------------------------------------------------------- run page: graph

function layout(graph) {
  const nodes = graph.nodes.map((n) => n.id);
  const out = dict();
  for (const n of nodes) out[n] = [];
  for (const e of graph.edges || []) own(out, e.source)?.push(e.target);
  const depth = dict();
  depth[graph.entry_node] = 0;
  const queue = [graph.entry_node];
  while (queue.length) {
    const n = queue.shift();
    for (const t of own(out, n) || []) if (!(t in depth)) { depth[t] = depth[n] + 1; queue.push(t); }
  }
  let deepest = Math.max(0, ...Object.values(depth));
  for (const n of nodes) if (!(n in depth)) depth[n] = ++deepest;
  const layers = dict();
  for (const n of nodes) (layers[depth[n]] ||= []).push(n);
  const pos = dict();
  const W = 150, H = 46, GX = 60, GY = 34;
  const widest = Math.max(...Object.values(layers).map((l) => l.length));
  for (const [d, members] of Object.entries(layers)) {
    members.forEach((n, i) => {
      const offset = (widest - members.length) * (W + GY) / 2;
      pos[n] = { x: 20 + Number(d) * (W + GX), y: 20 + offset + i * (H + GY) };
    });
  }
  const width = 40 + (Math.max(...Object.keys(layers).map(Number)) + 1) * (W + GX) - GX;
  const height = 40 + widest * (H + GY) - GY;
  return { pos, W, H, width, height };
}

function drawGraph(detail, takenEdges) {
  const graph = detail.graph;
  if (!graph) return h("p", { class: "muted" }, "No graph recorded.");
  const { pos, W, H, width, height } = layout(graph);
  const current = new Set(detail.current);
  const failed = new Set(detail.failed_nodes);
  const svg = s("svg", { class: "graph", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "graph" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa5b4" }))));
  for (const e of graph.edges || []) {
    const a = pos[e.source], b = pos[e.target];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const back = x2 <= x1;
    const d = back
      ? `M ${a.x + W / 2} ${a.y + H} C ${a.x + W / 2} ${a.y + H + 40}, ${b.x + W / 2} ${b.y + H + 40}, ${b.x + W / 2} ${b.y + H}`
      : `M ${x1} ${y1} C ${x1 + 30} ${y1}, ${x2 - 30} ${y2}, ${x2} ${y2}`;
    const taken = takenEdges.has(`${e.source}>${e.target}`);
    svg.append(s("path", { class: `edge${taken ? " taken" : ""}`, d, "marker-end": "url(#arrow)" },
      s("title", {}, `${reveal(e.source)} → ${reveal(e.target)} (${e.condition || "on_success"})${e.expression ? ": " + e.expression : ""}`)));
  }
  for (const n of graph.nodes) {
    const p = pos[n.id];
    const visits = own(detail.visit_counts, n.id) || 0;
    const classes = ["node", visits ? "visited" : "", current.has(n.id) ? "current" : "", failed.has(n.id) ? "failed" : ""].join(" ");
    // The id is cut to fit its box (fitLabels, once drawn); the tooltip has all of it.
    svg.append(s("g", { class: classes, "data-node": n.id, transform: `translate(${p.x},${p.y})` },
      s("title", {}, reveal(n.id)),
      s("rect", { width: W, height: H, rx: 7 }),
      s("text", { x: 10, y: 19, class: "label", "data-room": W - 20 }, reveal(n.id)),
      s("text", { x: 10, y: 36, class: "small" }, `${n.kind || "function"}${(graph.pause_nodes || []).includes(n.id) ? " · pause" : ""}`),
      visits ? s("text", { x: W - 10, y: 19, "text-anchor": "end", class: "count" }, `×${visits}`) : null));
  }
  return svg;
}

// Cut each node's label to the room its box has beside its visit count (measured: only a
// drawn text has a width).
function fitLabels(svg) {
  for (const text of svg.querySelectorAll("text.label")) {
    const count = text.parentNode.querySelector("text.count");
    const room = Number(text.dataset.room) - (count ? count.getComputedTextLength() + 8 : 0);
    if (text.getComputedTextLength() <= room) continue;
    const full = text.textContent;
    const mark = 12; // the width "…" takes, about
    let lo = 0, hi = Math.min(full.length, text.getNumberOfChars()) - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (text.getSubStringLength(0, mid) <= room - mark) lo = mid; else hi = mid - 1;
    }
    if (/[\uD800-\uDBFF]/.test(full[lo - 1] ?? "")) lo -= 1; // not half a surrogate pair
    text.textContent = `${full.slice(0, lo)}…`;
  }
}
