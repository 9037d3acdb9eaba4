// ldpkit dashboard: static, no build step. Reads the collector's JSON API with a read token;
// the charts are drawn by the views in views.js (Observable Plot).
"use strict";

const state = {
  token: sessionStorage.getItem("ldpkit-token") || "",
  metrics: [],
  current: null,
  versions: [],  // of the current metric: { fingerprint, current, mechanism, epsilon, n }
  queries: 0,
  data: null,
  subtree: null,  // a hierarchy: the node opened (null: a whole level)
};
const $ = (id) => document.getElementById(id);
// What the page drew last, for the browser tests (and anyone curious in the console).
window.ldpkitDashboard = { view: null, figures: [], data: null };

function showMessage(text, kind = "error") {
  const box = $("message");
  box.textContent = text;
  box.className = kind;
  box.hidden = !text;
}

// Seconds the page waits for an answer before saying so (a query asked to wait gets more).
const ANSWER_TIMEOUT_S = 30;
// Seconds a follow-up query asks the collector to wait for a fresh maintained estimate.
const FRESH_WAIT_S = 60;

// A 202: the collector is computing an estimate never computed before; ask again later.
class Computing extends Error {
  constructor(detail, retryAfter) {
    super(detail);
    this.retryAfter = retryAfter;
  }
}

async function api(path, timeoutS = ANSWER_TIMEOUT_S) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutS * 1000);
  let response, body = null;
  try {
    try {
      response = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, signal: abort.signal });
      try { body = await response.json(); } catch (_) { body = null; }
    } catch (err) {
      // This page came from the collector: an answer that does not come in time means it
      // is busy or stalled, not gone.
      if (abort.signal.aborted) throw new Error(`The collector did not answer within ${timeoutS} s (it is running, but busy or stalled). Refresh to ask again.`);
      throw new Error(`Cannot reach the collector (${err.message}). Is it running?`);
    }
  } finally {
    clearTimeout(timer);
  }
  if (response.status === 202) {
    const retryAfter = Math.max(1, Math.min(60, Number(response.headers.get("Retry-After")) || 5));
    throw new Computing(body && body.detail ? body.detail : "the estimate is being computed", retryAfter);
  }
  if (!response.ok) {
    const detail = body && body.detail ? body.detail : response.statusText;
    if (response.status === 401) throw new Error(`The token was refused (401): ${detail}. Enter a valid read token.`);
    if (response.status === 403) throw new Error(`This token may not read estimates (403): ${detail}. Use a read token.`);
    throw new Error(`The collector answered ${response.status}: ${detail}`);
  }
  return body;
}

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

const fmt = (v, digits = 4) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
const metricPath = (name) => encodeURIComponent(name);
const ROBUST_HEAD = ["robust", "robust low", "robust high", "robust shift"];

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
    if (state.metrics.length) await selectMetric(state.current || state.metrics[0].name);
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

// --- versions: every change of a metric's parameters starts one ----------------------
async function loadVersions(name) {
  const listing = await api(`/v1/metrics/${metricPath(name)}/versions`);
  const counts = await Promise.all(listing.versions.map((v) =>
    api(`/v1/estimates/${metricPath(name)}?version=${v.fingerprint}`).then((e) => e.n, () => null)));
  if (name !== state.current) return;  // another metric was picked meanwhile: its list stands
  state.versions = listing.versions.map((v, k) => ({
    fingerprint: v.fingerprint,
    current: v.fingerprint === listing.current,
    mechanism: v.resolved_mechanism || v.mechanism,
    epsilon: v.epsilon,
    definition: v,
    n: counts[k],
  })).reverse();  // newest first
  const select = $("version");
  select.replaceChildren();
  for (const v of state.versions) {
    const label = `${v.current ? "current" : "older"} · ${v.mechanism}, ε=${v.epsilon} · n=${v.n ?? "?"} · ${v.fingerprint.slice(0, 8)}`;
    const option = el("option", { value: v.current ? "" : v.fingerprint, "data-fingerprint": v.fingerprint }, label);
    select.appendChild(option);
  }
  select.disabled = state.versions.length < 2;
}

// --- each kind's own query controls ----------------------------------------------------
function kindControls(metric) {
  const box = $("kind-controls");
  box.replaceChildren();
  state.subtree = null;
  const kind = LDPK_VIEWS.kind(metric ? metric.kind : null);
  // How each kind makes its consistent estimates (docs/statistics.md).
  $("consistent-label").textContent = kind.label;
  $("consistent").disabled = !kind.consistent;
  // Simultaneous intervals: shown for the kinds that offer them (hierarchy depths and
  // subtrees, table cells and marginals, categories), unchecked and hidden otherwise.
  $("simultaneous-box").hidden = !kind.simultaneous;
  if (!kind.simultaneous) $("simultaneous").checked = false;
  const select = (id, label, options, chosen) => {
    const s = el("select", { id });
    for (const [value, text] of options) {
      const o = el("option", { value }, text);
      if (value === chosen) o.selected = true;
      s.appendChild(o);
    }
    s.addEventListener("change", () => { if (id === "depth") state.subtree = null; refresh(); });
    const l = el("label", {}, `${label} `);
    l.appendChild(s);
    box.appendChild(l);
  };
  const text = (id, label, value, placeholder) => {
    const input = el("input", { id, value, placeholder, size: "14" });
    input.addEventListener("change", () => refresh());
    const l = el("label", {}, `${label} `);
    l.appendChild(input);
    box.appendChild(l);
  };
  const button = (id, label, onClick) => {
    const b = el("button", { type: "button", id }, label);
    b.addEventListener("click", onClick);
    box.appendChild(b);
  };
  const open = (path) => { state.subtree = path; refresh(); };
  if (kind.controls) kind.controls(metric, { select, text, button, open });
}

function kindParams(params) {
  const value = (id) => ($(id) ? $(id).value.trim() : "");
  if (value("bins")) params.set("bins", value("bins"));
  if (value("quantiles")) params.set("quantiles", value("quantiles"));
  if (value("estimand")) params.set("estimand", value("estimand"));
  if (value("candidates")) params.set("candidates", value("candidates"));
  if (state.subtree) params.set("subtree", state.subtree);
  else if (value("depth")) params.set("depth", value("depth"));
}

async function selectMetric(name) {
  state.current = name;
  renderMetricList();
  kindControls(state.metrics.find((m) => m.name === name));
  try {
    await loadVersions(name);
  } catch (err) {
    showMessage(err.message);
    return;
  }
  await refresh();
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
  if ($("robust").checked) params.set("robust", "true");
  if ($("simultaneous").checked && !$("simultaneous-box").hidden) params.set("simultaneous", "true");
  const from = toUnix($("from").value), to = toUnix($("to").value);
  if (from) params.set("from", from);
  if (to) params.set("to", to);  // excluded, as in the API and `ldpkit estimates --to`
  if ($("version").value) params.set("version", $("version").value);
  kindParams(params);
  // Only the latest query may draw: a slower answer to an earlier click is dropped.
  const ticket = ++state.queries;
  const path = `/v1/estimates/${metricPath(state.current)}?${params}`;
  try {
    draw(await api(path), ticket, path);
  } catch (err) {
    if (ticket !== state.queries) return;
    if (err instanceof Computing) {
      // Never computed yet (an expensive kind's first estimate of its data): say so, ask again.
      showMessage(`Computing this estimate (strings, hierarchies, tables and distributions are computed in the background); asking again in ${err.retryAfter} s.`, "info");
      setTimeout(() => { if (ticket === state.queries) refresh(); }, err.retryAfter * 1000);
    } else {
      showMessage(err.message);
    }
  }
}

function draw(data, ticket, path) {
  if (ticket !== state.queries) return;
  showMessage("");
  state.data = data;
  render(data);
  hintOlderVersions(data);
  if (data.as_of && !data.as_of.fresh) awaitFresh(ticket, path);
}

// A maintained estimate older than its data: drawn at once ("computing, as of ..."), then
// the same query asks the collector to wait for the fresh one, drawn when it comes.
async function awaitFresh(ticket, path) {
  try {
    const data = await api(`${path}&wait=${FRESH_WAIT_S}`, FRESH_WAIT_S + ANSWER_TIMEOUT_S);
    if (ticket !== state.queries) return;
    if (data.as_of && data.as_of.fresh) draw(data, ticket, path);
    else setTimeout(() => { if (ticket === state.queries) awaitFresh(ticket, path); }, 1000);
  } catch (err) {
    if (ticket === state.queries) showMessage(err.message);
  }
}

function describeAsOf(asOf) {
  const when = new Date(asOf.computed_at * 1000).toISOString().slice(0, 19).replace("T", " ");
  if (asOf.fresh) return `as of ${when} UTC (${asOf.n} reports, fresh)`;
  const since = asOf.reports_since ? `${asOf.reports_since} received since` : "reports held since";
  return `computing: as of ${when} UTC (${asOf.n} reports; ${since})`;
}

function hintOlderVersions(data) {
  if (data.n !== 0 || $("version").value) return;
  const older = state.versions.filter((v) => !v.current && v.n);
  if (older.length) {
    showMessage(`The current version of ${data.metric} holds no reports in this range; ` +
      `${older.length === 1 ? "an older version holds" : "older versions hold"} ` +
      `${older.map((v) => `n=${v.n} (ε=${v.epsilon})`).join(", ")}: pick it under Version.`, "info");
  }
}

function describeRange(data) {
  const day = (t) => new Date(t * 1000).toISOString().slice(0, 16).replace("T", " ");
  if (data.from === null && data.to === null) return "all buckets";
  const parts = [];
  if (data.from !== null) parts.push(`from ${day(data.from)}`);
  if (data.to !== null) parts.push(`before ${day(data.to)}`);
  return `buckets ${parts.join(" ")} UTC`;
}

function render(data) {
  const metric = state.metrics.find((m) => m.name === data.metric);
  const version = state.versions.find((v) => v.fingerprint === data.version);
  const summary = $("summary");
  summary.replaceChildren(
    el("span", { id: "n" }, `n = ${data.n}`),
    el("span", { id: "epsilon" }, `ε = ${data.epsilon}`),
    el("span", { id: "mechanism" }, `mechanism: ${data.mechanism}`),
    el("span", { id: "level-shown", title: data.simultaneous ? "each group's intervals cover all its items together at this level (docs/statistics.md, Simultaneous intervals)" : "each interval on its own" },
      `${Math.round(data.level * 100)}% ${data.simultaneous ? "simultaneous " : ""}intervals`),
  );
  if (data.interval) summary.appendChild(el("span", { id: "interval-method" }, `interval: ${data.interval}`));
  if (data.as_of) {
    summary.appendChild(el("span", { id: "as-of", class: data.as_of.fresh ? "fresh" : "stale",
      title: "strings, hierarchies, tables and distributions are computed in the background (docs/protocol.md, Freshness)" },
      describeAsOf(data.as_of)));
  }
  if (data.forgery_fraction !== undefined) {
    summary.appendChild(el("span", { id: "forgery-fraction", title: "the largest change that fraction of forged reports could make, whatever they are (docs/statistics.md)" },
      `forgery shift: how far ${+(data.forgery_fraction * 100).toPrecision(6)}% forged reports could move each estimate`));
  }
  if (data.robust_note) summary.appendChild(el("span", { id: "robust-shown" }, `robust: ${data.robust_note}`));
  else if (data.robust) {
    const forged = data.robust.forged_reports === undefined ? "" : ` (${data.robust.forged_reports} of the ${data.n})`;
    summary.appendChild(el("span", { id: "robust-shown", title: "docs/statistics.md, Robust estimates" },
      `robust: projected onto what every honest population satisfies; its interval holds for the genuine reporters if up to ${+(data.robust.forgery_fraction * 100).toPrecision(6)}%${forged} of the reports are forged`));
  }
  summary.appendChild(el("span", { id: "range" }, describeRange(data)));
  summary.appendChild(el("span", { id: "version-shown" },
    `version ${data.version.slice(0, 8)}${version && !version.current ? " (older)" : ""}`));
  drawChart(data, metric, version);
  renderTable(data);
  renderBucketTable(data);
}

function drawChart(data, metric, version) {
  const chart = $("chart");
  chart.replaceChildren();
  const ctx = {
    metric: version ? version.definition : metric,
    // From the answer, not the checkbox: a redraw (on resize) of the answer before a toggle
    // must not ask the over-time view to draw an answer without buckets.
    overTime: $("over-time").checked && Array.isArray(data.buckets),
    width: Math.max(260, Math.floor(chart.clientWidth - 14)),
    open: (path) => { state.subtree = path; refresh(); },  // a hierarchy's node, clicked
  };
  const view = LDPK_VIEWS.pick(data, ctx);
  const drawn = view.draw(data, ctx);
  chart.appendChild(drawn.node);
  window.ldpkitDashboard = { view: view.name, figures: drawn.figures, data };
}

function renderTable(data) {
  const table = $("table");
  table.replaceChildren();
  if (data.items) {
    const kind = LDPK_VIEWS.kind(data.kind);
    const head = [kind.item, "estimate", "stderr", "low", "high", "forgery shift"];
    const columns = kind.columns || [];  // a kind's own columns: [heading, cell of an item]
    const consistent = data.consistent && kind.consistent;
    if (consistent) head.push("consistent");
    if (data.robust) head.push(...ROBUST_HEAD);
    head.push(...columns.map(([heading]) => heading));
    table.appendChild(row("th", head));
    for (const i of [...data.items, ...(kind.more ? kind.more(data) : [])]) {
      const cells = [LDPK_VIEWS.label(i), fmt(i.estimate), fmt(i.stderr), fmt(i.low), fmt(i.high), fmt(i.forgery_shift)];
      if (consistent) cells.push(fmt(i.consistent));
      if (data.robust) cells.push(fmt(i.robust), fmt(i.robust_low), fmt(i.robust_high), fmt(i.robust_forgery_shift));
      cells.push(...columns.map(([, cell]) => cell(i)));
      table.appendChild(row("td", cells));
    }
    for (const cells of kind.extra ? kind.extra(data, fmt) : []) table.appendChild(row("td", cells));
  } else {
    const r = data.robust;
    table.appendChild(row("th", ["mean", "stderr", "low", "high", "forgery shift", "beyond bounds", ...(r ? ROBUST_HEAD : [])]));
    table.appendChild(row("td", [fmt(data.mean), fmt(data.stderr), fmt(data.low), fmt(data.high), fmt(data.forgery_shift), data.beyond_bounds || "–",
      ...(r ? [fmt(r.mean), fmt(r.low), fmt(r.high), fmt(r.forgery_shift)] : [])]));
  }
}

function renderBucketTable(data) {
  const table = $("bucket-table");
  table.replaceChildren();
  if (!data.buckets || !$("over-time").checked) return;
  const when = (b) => new Date(b.bucket * 1000).toISOString().slice(0, 16).replace("T", " ");
  const robust = data.robust ? ROBUST_HEAD : [];
  if (data.items) {
    // Each bucket as the whole range's table: its items, a table's marginals, a
    // distribution's mean and quantiles.
    const kind = LDPK_VIEWS.kind(data.kind);
    table.appendChild(row("th", ["bucket (UTC)", "n", kind.item, "estimate", "stderr", "low", "high", "forgery shift", ...robust]));
    for (const b of data.buckets) {
      for (const i of [...(b.items || []), ...(kind.more ? kind.more(b) : [])]) {
        table.appendChild(row("td", [when(b), b.n, LDPK_VIEWS.label(i), fmt(i.estimate), fmt(i.stderr), fmt(i.low), fmt(i.high), fmt(i.forgery_shift),
          ...(robust.length ? [fmt(i.robust), fmt(i.robust_low), fmt(i.robust_high), fmt(i.robust_forgery_shift)] : [])]));
      }
      for (const cells of kind.extra ? kind.extra(b, fmt) : []) table.appendChild(row("td", [when(b), b.n, ...cells]));
    }
  } else {
    table.appendChild(row("th", ["bucket (UTC)", "n", "mean", "stderr", "low", "high", "forgery shift", "beyond bounds", ...robust]));
    for (const b of data.buckets) {
      const r = b.robust;
      table.appendChild(row("td", [when(b), b.n, fmt(b.mean), fmt(b.stderr), fmt(b.low), fmt(b.high), fmt(b.forgery_shift), b.beyond_bounds || "–",
        ...(robust.length ? [fmt(r && r.mean), fmt(r && r.low), fmt(r && r.high), fmt(r && r.forgery_shift)] : [])]));
    }
  }
}

function row(cell, values) {
  const tr = el("tr");
  for (const v of values) tr.appendChild(el(cell, {}, String(v)));
  return tr;
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => { if (state.data) drawChart(state.data, state.metrics.find((m) => m.name === state.data.metric), state.versions.find((v) => v.fingerprint === state.data.version)); }, 150);
});

$("token-form").addEventListener("submit", connect);
$("query").addEventListener("submit", refresh);
for (const id of ["level", "consistent", "robust", "simultaneous", "over-time", "version"]) $(id).addEventListener("change", () => refresh());
if (state.token) connect();
else showMessage("Enter a read token to see estimates.", "info");
