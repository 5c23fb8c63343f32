/* The lineage explorer's page. Routes by URL: "/" lists the tables, "/table/<layer>/<table>" shows one table:
 * its up/downstream graph (ECharts tree or Sankey, depth control), its columns (expand one: its path to its
 * sources, and what dropping it breaks) and its governance warnings. Data comes from this server's /api/... JSON
 * (the lineage graph's JSON of vertices and edges for the graph). */
"use strict";

const URN_PREFIX = "urn:sharp:dataset:";
const LAYER_COLORS = { ods: "#4098d7", dwd: "#3f9142", ads: "#e67e22", source: "#829ab1" };
const MAX_TREE_NODES = 400; // a tree repeats shared ancestors; past this it is cut with a "… more" node

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

async function api(path, params) {
  const url = path + "?" + new URLSearchParams(params || {}).toString();
  const res = await fetch(url);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

/* "urn:sharp:dataset:spark:dwd.x" -> "dwd.x"; other platforms keep their prefix ("mysql:shop.orders"). */
function qualifiedOf(urn) {
  const rest = urn.startsWith(URN_PREFIX) ? urn.slice(URN_PREFIX.length) : urn;
  const i = rest.indexOf(":");
  const platform = i >= 0 ? rest.slice(0, i) : "spark";
  const name = i >= 0 ? rest.slice(i + 1) : rest;
  return platform === "spark" ? name : platform + ":" + name;
}

function pagePath(qualified) {
  const i = qualified.lastIndexOf(":");
  const platform = i >= 0 ? qualified.slice(0, i + 1) : "";
  const rest = i >= 0 ? qualified.slice(i + 1) : qualified;
  return "/table/" + platform + rest.replace(".", "/");
}

function layerOf(qualified) {
  if (qualified.includes(":")) return "source";
  const db = qualified.split(".")[0];
  return LAYER_COLORS[db] ? db : "source";
}

function tableLink(qualified) {
  return `<a href="${esc(pagePath(qualified))}">${esc(qualified)}</a>`;
}

function newChart(el) {
  // SVG: crisp screenshots, and labels are DOM text a test can read. No animation: the first frame is final.
  return echarts.init(el, null, { renderer: "svg" });
}

/* ---- trees from edge lists ------------------------------------------------------------------------------- */

/* A tree rooted at `root` following `next(node)`; a node already on the path is shown once more, marked. */
function buildTree(root, next, label, styleOf) {
  let count = 0;
  function walk(node, ancestors) {
    count += 1;
    const item = { name: label(node), value: node, itemStyle: styleOf(node), children: [] };
    if (!ancestors.size) {
      // The root sits between the two sides: its label above it, so neither side's labels cover it.
      item.label = { position: "top", align: "center", verticalAlign: "bottom", distance: 8, fontWeight: "bold", backgroundColor: "#fff", padding: [1, 3] };
      item.symbolSize = 14;
    }
    if (ancestors.has(node)) {
      item.name += " (cycle)";
      return item;
    }
    const kids = next(node);
    const path = new Set(ancestors).add(node);
    for (const k of kids) {
      if (count >= MAX_TREE_NODES) {
        item.children.push({ name: "… more", value: "", itemStyle: { color: "#bbb" } });
        break;
      }
      item.children.push(walk(k, path));
    }
    return item;
  }
  return walk(root, new Set());
}

function treeSeries(data, orient, left, right, rootOnTop = false) {
  const leafSide = orient === "RL" ? "left" : "right";
  if (data.label && data.label.position === "top" && !rootOnTop) {
    // A one-sided tree: the root's label goes on its outer side, clear of its children's labels.
    data.label = { ...data.label, position: orient === "RL" ? "right" : "left", align: orient === "RL" ? "left" : "right", verticalAlign: "middle" };
  }
  return {
    type: "tree",
    data: [data],
    orient,
    left,
    right,
    top: "6%",
    bottom: "6%",
    symbolSize: 10,
    initialTreeDepth: -1,
    expandAndCollapse: true,
    animation: false,
    // Inner nodes are labelled above themselves (beside, a label would run over the next level's edges);
    // leaves on their outer side, where nothing else is drawn.
    label: { position: "top", align: "center", verticalAlign: "bottom", distance: 6, fontSize: 12 },
    leaves: { label: { position: leafSide, align: orient === "RL" ? "right" : "left" } },
    lineStyle: { width: 1.2, curveness: 0.5 },
    emphasis: { focus: "descendant" },
  };
}

function styleForTable(q) {
  return { color: LAYER_COLORS[layerOf(q)], borderColor: LAYER_COLORS[layerOf(q)] };
}

/* ---- the table graph ------------------------------------------------------------------------------------- */

function adjacency(graph) {
  const ups = new Map();
  const downs = new Map();
  for (const e of graph.edges) {
    const s = e.source.id;
    const t = e.target.id;
    if (!ups.has(t)) ups.set(t, []);
    if (!downs.has(s)) downs.set(s, []);
    ups.get(t).push(s);
    downs.get(s).push(t);
  }
  return { ups, downs };
}

function treeOption(graph, direction) {
  const { ups, downs } = adjacency(graph);
  const label = (urn) => qualifiedOf(urn);
  const style = (urn) => styleForTable(qualifiedOf(urn));
  const upTree = () => buildTree(graph.root, (n) => ups.get(n) || [], label, style);
  const downTree = () => buildTree(graph.root, (n) => downs.get(n) || [], label, style);
  let series;
  if (direction === "up") series = [treeSeries(upTree(), "RL", "28%", "20%")];
  else if (direction === "down") series = [treeSeries(downTree(), "LR", "20%", "28%")];
  else {
    const up = upTree();
    const down = downTree();
    if (!down.children.length) series = [treeSeries(up, "RL", "28%", "20%")];
    else if (!up.children.length) series = [treeSeries(down, "LR", "20%", "28%")];
    else {
      down.label = { show: false }; // the root is drawn twice, back to back: name it once
      series = [treeSeries(up, "RL", "14%", "50%", true), treeSeries(down, "LR", "50%", "14%", true)];
    }
  }
  return { tooltip: { trigger: "item", triggerOn: "mousemove" }, animation: false, series };
}

/* Sankey needs a DAG: edges closing a cycle (found by a depth-first walk) are dropped and counted. */
function sankeyOption(graph) {
  const weight = new Map();
  for (const c of graph.column_edges || []) {
    const k = c.source.id + "\u0000" + c.target.id;
    weight.set(k, (weight.get(k) || 0) + 1);
  }
  const { downs } = adjacency(graph);
  const state = new Map();
  const keep = [];
  let dropped = 0;
  function dfs(v) {
    state.set(v, 1);
    for (const w of downs.get(v) || []) {
      if (state.get(w) === 1) {
        dropped += 1;
        continue;
      }
      keep.push([v, w]);
      if (!state.has(w)) dfs(w);
    }
    state.set(v, 2);
  }
  for (const v of graph.vertices) if (!state.has(v)) dfs(v);
  const nodes = graph.vertices.map((urn) => {
    const q = qualifiedOf(urn);
    return { name: q, itemStyle: { color: LAYER_COLORS[layerOf(q)], borderColor: urn === graph.root ? "#102a43" : undefined, borderWidth: urn === graph.root ? 2 : 0 } };
  });
  const links = keep.map(([s, t]) => ({
    source: qualifiedOf(s),
    target: qualifiedOf(t),
    value: weight.get(s + "\u0000" + t) || 1,
  }));
  return {
    tooltip: { trigger: "item", formatter: (p) => (p.dataType === "edge" ? `${esc(p.data.source)} → ${esc(p.data.target)}: ${p.data.value} column edge(s)` : esc(p.name)) },
    animation: false,
    title: dropped ? { text: `${dropped} edge(s) closing a cycle not drawn`, textStyle: { fontSize: 12, color: "#b44d12" } } : undefined,
    series: [{ type: "sankey", data: nodes, links, left: "4%", right: "18%", top: 30, bottom: 20, nodeGap: 10, emphasis: { focus: "adjacency" }, lineStyle: { color: "gradient", opacity: 0.35 }, label: { fontSize: 12 } }],
  };
}

async function drawGraph(chart, table, controls) {
  const direction = controls.direction.value;
  const depth = controls.depth.value;
  const view = controls.view.value;
  const graph = await api("/api/graph", { table, direction, depth, columns: view === "sankey" ? 1 : 0 });
  chart.clear();
  chart.setOption(view === "sankey" ? sankeyOption(graph) : treeOption(graph, direction));
  const summary = document.getElementById("graph-summary");
  summary.textContent = `${graph.vertices.length} table(s), ${graph.edges.length} edge(s)`;
  document.getElementById("graph-chart").dataset.vertices = String(graph.vertices.length);
}

/* ---- a column's path and impact ------------------------------------------------------------------------- */

function columnTree(rootKey, edges, upstream) {
  const next = new Map();
  for (const e of edges) {
    const from = upstream ? e.target : e.source;
    const to = upstream ? e.source : e.target;
    const k = from.table + "." + from.column;
    if (!next.has(k)) next.set(k, []);
    next.get(k).push(to.table + "." + to.column);
  }
  const tableOfKey = (k) => k.slice(0, k.lastIndexOf("."));
  // The root is named by the panel's heading: its label is the bare column, so it fits beside it.
  const label = (n) => (n === rootKey ? n.slice(n.lastIndexOf(".") + 1) : n);
  return buildTree(rootKey, (n) => next.get(n) || [], label, (n) => styleForTable(tableOfKey(n)));
}

// Where an impacted column's SQL reads the changed one (`file:line`, as `lineage impact` prints it).
function readsText(c) {
  return (c.reads || []).map((r) => (r.line == null ? r.file : `${r.file}:${r.line}`)).join(", ");
}

function columnList(items) {
  return items.map((c) => `<li><code>${esc(c.table)}.${esc(c.column)}</code>`
    + (readsText(c) ? ` <span class="impact-read">read at ${esc(readsText(c))}</span>` : "") + "</li>").join("");
}

async function expandColumn(table, name, row, button) {
  const open = row.nextElementSibling && row.nextElementSibling.classList.contains("detail") ? row.nextElementSibling : null;
  if (open) {
    open.remove();
    button.textContent = "expand";
    return;
  }
  button.textContent = "collapse";
  const detail = document.createElement("tr");
  detail.className = "detail";
  detail.dataset.column = name;
  const cell = document.createElement("td");
  cell.colSpan = 4;
  cell.innerHTML = '<p class="muted">Loading…</p>';
  detail.appendChild(cell);
  row.after(detail);
  let info;
  try {
    info = await api("/api/column", { table, column: name });
  } catch (err) {
    cell.innerHTML = `<p class="error">${esc(err.message)}</p>`;
    return;
  }
  const rootKey = info.table + "." + info.column;
  const columnsHit = info.impact.filter((c) => c.column !== "*");
  const tablesHit = info.impact.filter((c) => c.column === "*");
  cell.innerHTML = `
    <div class="detail-grid">
      <div>
        <h3>Path of <code>${esc(rootKey)}</code> to its sources</h3>
        <div class="chart small column-path"></div>
        <p>${info.origins.length ? "Comes from: " : '<span class="muted">No upstream column: a source column.</span>'}
          ${info.origins.map((c) => `<code>${esc(c.table)}.${esc(c.column)}</code>`).join(", ")}</p>
      </div>
      <div>
        <h3>If <code>${esc(rootKey)}</code> is dropped</h3>
        <div class="chart small column-impact"></div>
        ${columnsHit.length || tablesHit.length
          ? `<p class="impact-some">${columnsHit.length} downstream column(s) break:</p><ul class="impact-columns">${columnList(columnsHit)}</ul>`
            + (tablesHit.length ? `<p class="impact-some">Rows of these tables are filtered, joined, grouped or ordered by it: ${tablesHit.map((c) => tableLink(c.table) + (readsText(c) ? ` <span class="impact-read">(${esc(readsText(c))})</span>` : "")).join(", ")}</p>` : "")
          : '<p class="impact-none">Nothing downstream reads it: safe to drop as far as lineage knows.</p>'}
      </div>
    </div>`;
  const pathChart = newChart(cell.querySelector(".column-path"));
  pathChart.setOption({ animation: false, tooltip: {}, series: [treeSeries(columnTree(rootKey, info.path, true), "RL", "40%", "22%")] });
  const impactChart = newChart(cell.querySelector(".column-impact"));
  impactChart.setOption({ animation: false, tooltip: {}, series: [treeSeries(columnTree(rootKey, info.impact_path, false), "LR", "22%", "40%")] });
  detail.dataset.ready = "1";
}

/* ---- pages ----------------------------------------------------------------------------------------------- */

async function tablePage(main, name) {
  const info = await api("/api/table", { table: name });
  const t = info.table;
  document.title = `${t.qualified} · lineage explorer`;
  const warnings = info.governance.length
    ? `<div class="warnings" id="governance"><strong>Governance warnings</strong><ul>${info.governance.map((v) => `<li>${esc(v.rule)}: ${esc(v.message)}</li>`).join("")}</ul></div>`
    : '<p class="ok" id="governance">No governance warning (layer and naming rules).</p>';
  main.innerHTML = `
    <h1>${esc(t.qualified)}</h1>
    <div><span class="badge layer-${esc(t.layer)}">${esc(t.layer)}</span><span class="badge">${esc(t.kind)}</span>
      ${t.job ? `<span class="muted">written by asset <code>${esc(t.job.name)}</code></span>` : ""}</div>
    ${warnings}
    <p>Reads: ${info.upstream.map(tableLink).join(", ") || '<span class="muted">nothing (a source)</span>'}<br>
       Read by: ${info.downstream.map(tableLink).join(", ") || '<span class="muted">nothing downstream</span>'}</p>
    <h2>Lineage graph</h2>
    <div class="controls">
      <label>direction <select id="direction"><option value="up">upstream</option><option value="down">downstream</option><option value="both" selected>both</option></select></label>
      <label>depth <select id="depth"><option>1</option><option selected>2</option><option>3</option><option>5</option><option value="all">all</option></select></label>
      <label>view <select id="view"><option value="tree">tree</option><option value="sankey">Sankey</option></select></label>
      <span class="muted" id="graph-summary"></span>
    </div>
    <div class="chart" id="graph-chart"></div>
    <h2>Columns</h2>
    <table id="columns"><thead><tr><th>column</th><th>computed from</th><th>read downstream</th><th></th></tr></thead><tbody></tbody></table>`;
  const tbody = main.querySelector("#columns tbody");
  if (!info.columns.length) tbody.innerHTML = '<tr><td colspan="4" class="muted">No column lineage is known for this table.</td></tr>';
  for (const c of info.columns) {
    const row = document.createElement("tr");
    row.dataset.column = c.name;
    row.innerHTML = `<td><code>${esc(c.name)}</code></td>
      <td>${c.sources.map((s) => `<code>${esc(s.table)}.${esc(s.column)}</code>`).join(", ") || '<span class="muted">—</span>'}</td>
      <td>${c.read_downstream ? "yes" : '<span class="muted">no</span>'}</td>
      <td><button class="expand" type="button">expand</button></td>`;
    const button = row.querySelector("button");
    button.addEventListener("click", () => expandColumn(t.qualified, c.name, row, button));
    tbody.appendChild(row);
  }
  const chartEl = main.querySelector("#graph-chart");
  const chart = newChart(chartEl);
  chart.on("click", (p) => {
    const q = p.data && typeof p.data.value === "string" && p.data.value.startsWith(URN_PREFIX) ? qualifiedOf(p.data.value) : p.dataType === "node" ? p.name : null;
    if (q && q !== t.qualified) window.location.href = pagePath(q);
  });
  window.addEventListener("resize", () => chart.resize());
  const controls = { direction: main.querySelector("#direction"), depth: main.querySelector("#depth"), view: main.querySelector("#view") };
  const redraw = () => drawGraph(chart, t.qualified, controls).catch((err) => {
    document.getElementById("graph-summary").innerHTML = `<span class="error">${esc(err.message)}</span>`;
  });
  for (const el of Object.values(controls)) el.addEventListener("change", redraw);
  await redraw();
}

async function homePage(main, tables) {
  const gov = await api("/api/governance");
  const byLayer = new Map();
  for (const t of tables) {
    if (!byLayer.has(t.layer)) byLayer.set(t.layer, []);
    byLayer.get(t.layer).push(t);
  }
  const order = ["ads", "dwd", "ods", "source"].filter((l) => byLayer.has(l)).concat([...byLayer.keys()].filter((l) => !["ads", "dwd", "ods", "source"].includes(l)));
  main.innerHTML = `<h1>Tables</h1>
    ${gov.violations.length ? `<div class="warnings"><strong>${gov.violations.length} governance warning(s)</strong><ul>${gov.violations.slice(0, 50).map((v) => `<li>${tableLink(v.table)}: ${esc(v.message)}</li>`).join("")}</ul></div>` : '<p class="ok">No governance warning.</p>'}
    ${order.map((l) => `<h2><span class="badge layer-${esc(l)}">${esc(l)}</span> ${byLayer.get(l).length} table(s)</h2>
      <p>${byLayer.get(l).slice(0, 500).map((t) => tableLink(t.qualified) + (t.violations ? " ⚠" : "")).join(" · ")}</p>`).join("")}`;
}

async function main() {
  const main = document.getElementById("main");
  try {
    if (typeof echarts === "undefined") throw new Error("the ECharts library did not load from /static/vendor/echarts.min.js (run npm ci in the explorer's static folder)");
    const { tables } = await api("/api/tables");
    const names = document.getElementById("table-names");
    names.innerHTML = tables.slice(0, 5000).map((t) => `<option value="${esc(t.qualified)}">`).join("");
    document.getElementById("jump").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = document.getElementById("jump-input").value.trim();
      if (v) window.location.href = pagePath(v);
    });
    const path = decodeURIComponent(window.location.pathname);
    if (path.startsWith("/table/")) await tablePage(main, path.slice("/table/".length));
    else await homePage(main, tables);
    document.body.dataset.ready = "1";
  } catch (err) {
    main.innerHTML = `<p class="error">${esc(err.message)}</p>`;
    document.body.dataset.ready = "error";
  }
}

main();
