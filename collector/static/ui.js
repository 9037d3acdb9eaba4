// ldpkit dashboard: static, no build step. Reads the collector's JSON API with a read token.
"use strict";

const state = { token: sessionStorage.getItem("ldpkit-token") || "", metrics: [], current: null, queries: 0 };
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

function showMessage(text, kind = "error") {
  const box = $("message");
  box.textContent = text;
  box.className = kind;
  box.hidden = !text;
}

async function api(path) {
  let response;
  try {
    response = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` } });
  } catch (err) {
    throw new Error(`Cannot reach the collector (${err.message}). Is it running?`);
  }
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) {
    const detail = body && body.detail ? body.detail : response.statusText;
    if (response.status === 401) throw new Error(`The token was refused (401): ${detail}. Enter a valid read token.`);
    if (response.status === 403) throw new Error(`This token may not read estimates (403): ${detail}. Use a read token.`);
    throw new Error(`The collector answered ${response.status}: ${detail}`);
  }
  return body;
}

function el(tag, attrs = {}, text = null) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

const fmt = (v, digits = 4) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));

async function connect(event) {
  if (event) event.preventDefault();
  const input = $("token").value.trim();
  if (input) state.token = input;
  if (!state.token) { showMessage("Enter a read token to see estimates."); return; }
  try {
    const data = await api("/v1/metrics");
    state.metrics = data.metrics;
    sessionStorage.setItem("ldpkit-token", state.token);
    showMessage("");
    $("main").hidden = false;
    renderMetricList();
    if (state.metrics.length) selectMetric(state.current || state.metrics[0].name);
    else showMessage("No metrics are defined on this collector yet.", "info");
  } catch (err) {
    $("main").hidden = true;
    sessionStorage.removeItem("ldpkit-token");
    showMessage(err.message);
  }
}

function renderMetricList() {
  const list = $("metric-list");
  list.replaceChildren();
  for (const m of state.metrics) {
    const button = el("button", { type: "button", "data-metric": m.name }, m.name);
    if (m.name === state.current) button.classList.add("active");
    button.addEventListener("click", () => selectMetric(m.name));
    const li = el("li");
    li.appendChild(button);
    list.appendChild(li);
  }
}

function selectMetric(name) {
  state.current = name;
  renderMetricList();
  refresh();
}

function toUnix(dateValue) {
  return dateValue ? String(Math.floor(Date.parse(dateValue + "T00:00:00Z") / 1000)) : null;
}

async function refresh(event) {
  if (event) event.preventDefault();
  if (!state.current) return;
  const params = new URLSearchParams({
    level: $("level").value,
    consistent: $("consistent").checked ? "true" : "false",
    per_bucket: $("over-time").checked ? "true" : "false",
  });
  const from = toUnix($("from").value), to = toUnix($("to").value);
  if (from) params.set("from", from);
  if (to) params.set("to", String(Number(to) + 86400));  // the "to" day is included
  // Only the latest query may draw: a slower answer to an earlier click is dropped.
  const ticket = ++state.queries;
  try {
    const data = await api(`/v1/estimates/${encodeURIComponent(state.current)}?${params}`);
    if (ticket !== state.queries) return;
    showMessage("");
    render(data);
  } catch (err) {
    if (ticket === state.queries) showMessage(err.message);
  }
}

function render(data) {
  const summary = $("summary");
  summary.replaceChildren(
    el("span", { id: "n" }, `n = ${data.n}`),
    el("span", { id: "epsilon" }, `ε = ${data.epsilon}`),
    el("span", { id: "mechanism" }, `mechanism: ${data.mechanism}`),
    el("span", {}, `${Math.round(data.level * 100)}% intervals`),
  );
  const chart = $("chart");
  chart.replaceChildren();
  if (data.buckets && $("over-time").checked) chart.appendChild(timeChart(data));
  else if (data.items) chart.appendChild(barChart(data));
  else chart.appendChild(meanChart(data));
  renderTable(data);
}

function scale(lo, hi, a, b) { return (v) => a + ((v - lo) / (hi - lo || 1)) * (b - a); }

function barChart(data) {
  const items = data.items, W = Math.max(420, 70 * items.length + 80), H = 300, pad = 40;
  const vals = items.flatMap((i) => [i.low, i.high, i.estimate, 0]).filter((v) => v !== null);
  const lo = Math.min(0, ...vals), hi = Math.max(0.05, ...vals);
  const y = scale(lo, hi, H - pad, 15), step = (W - pad - 10) / items.length;
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", style: `max-width:${W}px`, id: "bars" });
  svg.appendChild(el("svg:line", { class: "axis", x1: pad, x2: W - 5, y1: y(0), y2: y(0) }));
  for (const t of [lo, (lo + hi) / 2, hi]) {
    svg.appendChild(el("svg:text", { class: "label", x: 2, y: y(t) + 4 }, t.toFixed(2)));
  }
  items.forEach((item, k) => {
    const x = pad + k * step + step * 0.15, w = step * 0.7, cx = x + w / 2;
    if (item.estimate !== null) {
      const top = Math.min(y(item.estimate), y(0)), h = Math.abs(y(item.estimate) - y(0));
      svg.appendChild(el("svg:rect", { class: "bar", x, y: top, width: w, height: Math.max(h, 0.5),
        "data-category": item.category, "data-estimate": item.estimate }));
      svg.appendChild(el("svg:line", { class: "whisker", x1: cx, x2: cx, y1: y(item.low), y2: y(item.high),
        "data-category": item.category, "data-low": item.low, "data-high": item.high }));
      for (const v of [item.low, item.high]) {
        svg.appendChild(el("svg:line", { class: "whisker-cap", x1: cx - 6, x2: cx + 6, y1: y(v), y2: y(v), stroke: "#111" }));
      }
      if (item.consistent !== undefined && item.consistent !== null) {
        svg.appendChild(el("svg:line", { class: "consistent-mark", x1: x, x2: x + w, y1: y(item.consistent), y2: y(item.consistent),
          "data-category": item.category, "data-consistent": item.consistent }));
      }
    }
    svg.appendChild(el("svg:text", { class: "label", x: cx, y: H - pad + 14, "text-anchor": "middle" }, item.category));
  });
  return svg;
}

function meanChart(data) {
  const W = 560, H = 140;
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", style: `max-width:${W}px`, id: "mean" });
  if (data.mean === null) {
    svg.appendChild(el("svg:text", { class: "label", x: 20, y: 70 }, "no reports in this range"));
    return svg;
  }
  // The axis spans the metric's declared bounds, so the interval's width reads at a glance.
  const metric = state.metrics.find((m) => m.name === data.metric);
  const [lo, hi] = metric && metric.bounds ? metric.bounds : [data.low, data.high];
  const x = scale(Math.min(lo, data.low), Math.max(hi, data.high), 30, W - 30);
  svg.appendChild(el("svg:line", { class: "axis", x1: x(lo), x2: x(hi), y1: 100, y2: 100 }));
  for (const t of [lo, hi]) {
    svg.appendChild(el("svg:text", { class: "label", x: x(t), y: 118, "text-anchor": "middle" }, String(t)));
  }
  svg.appendChild(el("svg:line", { class: "whisker", x1: x(data.low), x2: x(data.high), y1: 60, y2: 60,
    "data-low": data.low, "data-high": data.high }));
  for (const v of [data.low, data.high]) {
    svg.appendChild(el("svg:line", { class: "whisker-cap", x1: x(v), x2: x(v), y1: 53, y2: 67, stroke: "#111" }));
  }
  svg.appendChild(el("svg:circle", { class: "point", cx: x(data.mean), cy: 60, r: 6, fill: "#4C78A8", "data-mean": data.mean }));
  svg.appendChild(el("svg:text", { class: "label", x: x(data.mean), y: 40, "text-anchor": "middle" },
    `mean ${fmt(data.mean, 3)}  [${fmt(data.low, 3)}, ${fmt(data.high, 3)}]`));
  return svg;
}

function timeChart(data) {
  const buckets = data.buckets, W = 640, H = 300, pad = 40;
  const series = data.items ? data.items.map((i, k) => ({ name: i.category, pts: buckets.map((b) => b.items ? b.items[k] : null) }))
    : [{ name: "mean", pts: buckets.map((b) => ({ estimate: b.mean, low: b.low, high: b.high })) }];
  const vals = series.flatMap((s) => s.pts.flatMap((p) => (p ? [p.low, p.high] : []))).filter((v) => v !== null);
  const lo = Math.min(...vals, 0), hi = Math.max(...vals, 0.05);
  const y = scale(lo, hi, H - pad, 15), x = scale(0, Math.max(buckets.length - 1, 1), pad + 10, W - 20);
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", style: `max-width:${W}px`, id: "over-time-chart" });
  const colors = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"];
  series.forEach((s, k) => {
    const color = colors[k % colors.length];
    s.pts.forEach((p, t) => {
      if (!p || p.estimate === null) return;
      svg.appendChild(el("svg:line", { class: "whisker", x1: x(t), x2: x(t), y1: y(p.low), y2: y(p.high), stroke: color, "data-series": s.name }));
      svg.appendChild(el("svg:circle", { cx: x(t), cy: y(p.estimate), r: 3.5, fill: color, "data-series": s.name }));
    });
    svg.appendChild(el("svg:text", { class: "label", x: W - 120, y: 20 + 14 * k, fill: color }, s.name));
  });
  buckets.forEach((b, t) => {
    svg.appendChild(el("svg:text", { class: "label", x: x(t), y: H - pad + 14, "text-anchor": "middle" },
      new Date(b.bucket * 1000).toISOString().slice(0, 10)));
  });
  return svg;
}

function renderTable(data) {
  const table = $("table");
  table.replaceChildren();
  if (data.items) {
    const head = ["category", "estimate", "stderr", "low", "high"];
    if (data.consistent) head.push("consistent");
    table.appendChild(row("th", head));
    for (const i of data.items) {
      const cells = [i.category, fmt(i.estimate), fmt(i.stderr), fmt(i.low), fmt(i.high)];
      if (data.consistent) cells.push(fmt(i.consistent));
      table.appendChild(row("td", cells));
    }
  } else {
    table.appendChild(row("th", ["mean", "stderr", "low", "high"]));
    table.appendChild(row("td", [fmt(data.mean), fmt(data.stderr), fmt(data.low), fmt(data.high)]));
  }
}

function row(cell, values) {
  const tr = el("tr");
  for (const v of values) tr.appendChild(el(cell, {}, String(v)));
  return tr;
}

$("token-form").addEventListener("submit", connect);
$("query").addEventListener("submit", refresh);
for (const id of ["level", "consistent", "over-time"]) $(id).addEventListener("change", () => refresh());
if (state.token) connect();
else showMessage("Enter a read token to see estimates.", "info");
