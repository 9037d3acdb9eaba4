// ldpkit dashboard views: one entry per kind of chart, drawn with Observable Plot.
//
// A view is { name, applies(data, ctx), draw(data, ctx) } where `data` is the JSON of
// GET /v1/estimates/{metric} and ctx = { metric (its definition), width, overTime }.
// draw() returns { node, figures } — the element to show, and the Plot figures in it
// (tests read their scales to check what is drawn against the API's values).
// A kind (data.kind) names its own view in KINDS — a histogram with whiskers and marked
// quantiles, a tree opened level by level, a two-way table as a heat map with its
// marginals, a ranked list of strings with intervals; otherwise the first view whose
// applies() is true draws: bars for categories, the mean, estimates over time.
"use strict";

const LDPK_VIEWS = (() => {
  const views = [];
  const BAR = "#4C78A8", WHISKER = "#222", CONSISTENT = "#F58518", ROBUST = "#54A24B";

  function register(view) { views.push(view); }
  function pick(data, ctx) {
    const own = ctx.overTime ? kind(data.kind).overTime : kind(data.kind).view;
    return views.find((v) => (own ? v.name === own : v.applies && v.applies(data, ctx)));
  }

  // Everything the page does per metric kind: its own `view` (else bars or the mean), what
  // an `item` is in the table, its consistent estimates (`consistent`: false for none), its
  // own query `controls`, the table's rows beside the items (`more`, `extra`) and whether it
  // offers `simultaneous` intervals (every item of a group covered together).
  // Ordered categories add their mean rank (1 = the first category) below the items, then
  // the share at each category or later ("at least 4"), from the answer's `at_least`.
  const meanRank = (data, fmt) => {
    const r = data.mean_rank;
    const shares = (data.at_least || []).map((s) => [`share at least ${s.category}`, fmt(s.estimate), fmt(s.stderr), fmt(s.low), fmt(s.high), "–"]);
    return r ? [["mean rank (1..d)", fmt(r.estimate), fmt(r.stderr), fmt(r.low), fmt(r.high), "–"], ...shares] : [];
  };
  const CATEGORICAL = { item: "category", label: "consistent (Norm-Sub)", consistent: true, simultaneous: true, extra: meanRank };
  const KINDS = {
    categorical: CATEGORICAL,
    numeric: { ...CATEGORICAL, consistent: false, simultaneous: false },
    distribution: {
      ...CATEGORICAL, view: "histogram", overTime: "distribution-over-time", item: "bin", consistent: false, simultaneous: true,
      controls(metric, ui) {
        ui.select("bins", "Bins", [["8", "8"], ["16", "16"], ["32", "32"], ["64", "64"]], "16");
        ui.text("quantiles", "Quantiles", "0.5,0.9", "0.5,0.9");
        ui.select("estimand", "Intervals for", [["reporters", "the reporting users"], ["population", "their population"]], "reporters");
      },
      extra: (data, fmt) => [
        ...(data.quantiles || []).map((q) => [`quantile ${q.q}`, fmt(q.value), "", fmt(q.low), fmt(q.high), fmt(q.forgery_shift)]),
        ...(data.mean !== undefined ? [["mean", fmt(data.mean), fmt(data.mean_stderr), fmt(data.mean_low), fmt(data.mean_high), fmt(data.mean_forgery_shift)]] : []),
      ],
    },
    hierarchy: {
      ...CATEGORICAL, view: "tree", overTime: "tree-over-time", label: "consistent (top-down Norm-Sub)",
      controls(metric, ui) {
        const sep = metric.separator || "/";
        const depth = Math.max(...metric.categories.map((c) => c.split(sep).length));
        const options = [];
        for (let d = 1; d <= depth; d++) options.push([String(d), d === depth ? `${d} (leaves)` : String(d)]);
        ui.select("depth", "Depth", options, "1");
        ui.button("tree-top", "whole level", () => ui.open(null));
      },
    },
    table: {
      ...CATEGORICAL, view: "heatmap", overTime: "table-over-time", item: "cell", label: "consistent (IPF to the marginals)",
      more: (data) => Object.entries(data.marginals || {}).flatMap(([name, items]) =>
        items.map((i) => ({ ...i, category: `${name}=${i.category} (marginal)` }))),
    },
    strings: {
      ...CATEGORICAL, view: "ranked", item: "string", consistent: false, simultaneous: false,
      controls(metric, ui) { ui.text("candidates", "Candidates", "", "word,another"); },
      more: (data) => (data.candidates || []).map((i) => ({ ...i, category: `${i.category} (asked)` })),
      // Each listed string's evidence (docs/statistics.md, "How strong a listing is").
      columns: [["evidence z", (i) => (i.evidence_z === null || i.evidence_z === undefined ? "–" : Number(i.evidence_z).toFixed(2))]],
    },
  };
  // A kind this page does not know (a newer collector's) shows its items as categories.
  function kind(name) { return KINDS[name] || CATEGORICAL; }

  const pct = (level) => `${Math.round(level * 100)}%`;
  // The whiskers' key: a simultaneous answer's intervals cover each group together.
  const intervalLabel = (data) => `${pct(data.level)} ${data.simultaneous ? "simultaneous interval (all together)" : "interval"}`;
  const num = (v, digits = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
  // The forgery shift beside an interval: how far the answer's forged fraction could move it.
  const shift = (v, digits = 3) => (v === null || v === undefined ? "" : `, forgery shift ±${num(v, digits)}`);
  // A robust answer (robust=true): the estimate and interval robust to the answer's forged
  // fraction, drawn in green beside the unbiased ones (docs/statistics.md, "Robust estimates").
  const robustLabel = (data) => `robust (interval: the genuine reporters', up to ${+(data.robust.forgery_fraction * 100).toPrecision(6)}% forged)`;
  const robustTitle = (e, low, high, s) => (e === null || e === undefined ? "" : `; robust ${num(e, 4)} [${num(low, 4)}, ${num(high, 4)}]${shift(s, 4)}`);
  // What a mean's interval wholly beyond its bounds means (docs/statistics.md).
  const beyond = (data) => `Beyond the bounds: the ${pct(data.level)} interval lies wholly ${data.beyond_bounds === "upper" ? "above" : "below"} ` +
    "the metric's bounds; no population of values within them gives such reports but by chance: forged reports are the likely cause.";

  // Which is the most common (docs/statistics.md): the answer's `most_common` names the
  // items that could be at its level; their bars are drawn dark, the others light.
  const OTHER = "#B6CCE3";
  const itemName = (v) => (v !== null && typeof v === "object" ? `(${Object.entries(v).map(([k, x]) => `${k}=${x}`).join(", ")})` : String(v));
  const setText = (c) => `most common: ${itemName(c.mode)} (${c.set.length > 1 ? `or ${c.set.slice(1).map(itemName).join(", ")} at` : "alone at"} ${pct(c.level)})`;
  const hasMode = (data) => Boolean(data.most_common && data.most_common.mode !== null && data.most_common.mode !== undefined);
  // Whether an item (a category, a node, a cell) is in the set; every item is without one.
  function inSet(data) {
    if (!hasMode(data)) return () => true;
    const names = new Set(data.most_common.set.map(itemName));
    // A bin is named "[lo, hi)" with 6 significant digits: matched by its edges.
    const near = (a, b) => Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(b));
    const edges = data.most_common.set.map((n) => String(n).slice(1, -1).split(", ").map(Number));
    return (i) => (i.lower !== undefined
      ? edges.some(([lo, hi]) => near(lo, i.lower) && near(hi, i.upper))
      : names.has(itemName(i.cell || i.category)));
  }
  // The line that says it, and the top items' ranks with their intervals (holding together).
  function mostCommon(node, data) {
    if (!hasMode(data)) return;
    const c = data.most_common;
    node.appendChild(html("p", { class: "most-common", id: "most-common" }, setText(c)));
    const ranks = (c.ranks || []).map((r) => `${itemName(r.cell || r.category)} ${r.rank} [${r.low}, ${r.high}]`);
    if (ranks.length) node.appendChild(html("p", { class: "note", id: "ranks" }, `ranks, ${pct(c.level)} intervals holding together: ${ranks.join(", ")}`));
  }
  // Over time: each bucket's set, its points filled (the others hollow) or its cells outlined.
  const bucketLevel = (data) => (data.buckets || []).filter(hasMode).map((b) => b.most_common.level)[0];
  const bucketSetKey = (data, cells = false) => {
    const level = bucketLevel(data);
    if (level === undefined) return [];
    const could = `could be the bucket's most common (${pct(level)})`;
    return cells ? [[`outlined: ${could}`, "#222", "outline"]]
      : [[could, "#444", "dot"], ["hollow: less common than one of those", "#444", "ring"]];
  };
  const setKey = (data) => (hasMode(data)
    ? [[`could be the most common (${pct(data.most_common.level)})`, BAR], ["less common than one of those", OTHER]]
    : [["unbiased estimate", BAR]]);

  // Every figure marks its plot area (the frame inside the margins, class "plot-area"):
  // nothing may be drawn outside it, which the browser tests check.
  function plot(options) {
    return Plot.plot({ ...options, marks: [...options.marks, Plot.frame({ stroke: "none", fill: "none", className: "plot-area" })] });
  }

  function html(tag, attrs = {}, text = null) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== null) node.textContent = text;
    return node;
  }

  // A key for marks that a colour legend does not explain (bar, whisker, tick).
  function key(entries) {
    const box = html("div", { class: "key" });
    for (const [label, colour, shape] of entries) {
      const item = html("span", { class: shape || "", style: `--swatch: ${colour}` }, label);
      box.appendChild(item);
    }
    return box;
  }

  // Distinct colours for up to 10 series (Tableau 10), then evenly spread hues.
  function palette(n) {
    if (n <= 10) return d3.schemeTableau10.slice(0, n);
    return d3.quantize((t) => d3.interpolateTurbo(0.08 + 0.84 * t), n);
  }

  // Ticks that include both ends of the domain (the bounds), without crowding them.
  function endTicks(domain, width) {
    const [lo, hi] = domain, span = hi - lo;
    const inner = d3.ticks(lo, hi, Math.max(3, Math.floor(width / 90)))
      .filter((t) => t - lo > 0.07 * span && hi - t > 0.07 * span);
    return [lo, ...inner, hi];
  }

  function fontStyle(width) {
    return { fontSize: width < 520 ? "11px" : "13px", overflow: "visible" };
  }

  // What an item is about, as one line: a category, a node path, a cell, a bin.
  function label(i) {
    if (i.category !== undefined) return i.category;
    if (i.cell) return Object.entries(i.cell).map(([k, v]) => `${k}=${v}`).join(", ");
    if (i.lower !== undefined) return `[${+i.lower.toPrecision(6)}, ${+i.upper.toPrecision(6)})`;
    return "";
  }

  // Bars with interval whiskers for a list of items (categories, nodes, a marginal).
  function bars(items, data, ctx, opts = {}) {
    const shown = items.filter((i) => i.estimate !== null).map((i) => ({ ...i, label: label(i) }));
    const values = shown.flatMap((i) => [i.low, i.high, i.consistent]).filter((v) => v !== null && v !== undefined);
    const names = shown.map((i) => i.label);
    const longest = Math.max(4, ...names.map((n) => n.length));
    const width = Math.min(ctx.width, 150 * names.length + 120);
    const rotate = names.length * longest * 7.5 > width - 70;
    const band = ((width - 72) / Math.max(names.length, 1)) * 0.75;
    const cap = Math.max(0, band / 2 - 9);
    return plot({
      width,
      height: opts.height || 340,
      marginLeft: 56,
      marginRight: 16,
      marginBottom: rotate ? 16 + 6.5 * Math.min(longest, 24) : 36,
      style: fontStyle(ctx.width),
      x: { domain: names, label: opts.xLabel || null, tickRotate: rotate ? -40 : 0, padding: 0.25 },
      y: { domain: [Math.min(0, ...values), Math.max(0.05, ...values)], nice: true, grid: true, label: "fraction of users" },
      marks: [
        Plot.barY(shown, { x: "label", y: "estimate", fill: opts.member ? (i) => (opts.member(i) ? BAR : OTHER) : BAR, className: "estimate-bars",
          title: (i) => `${i.label}: ${num(i.estimate, 4)} [${num(i.low, 4)}, ${num(i.high, 4)}]${shift(i.forgery_shift, 4)}${opts.hint || ""}` }),
        Plot.ruleY([0], { stroke: "#888" }),
        Plot.ruleX(shown, { x: "label", y1: "low", y2: "high", stroke: WHISKER, strokeWidth: 2, className: "whiskers" }),
        Plot.tickY(shown, { x: "label", y: "low", stroke: WHISKER, strokeWidth: 2, inset: cap, className: "whisker-caps" }),
        Plot.tickY(shown, { x: "label", y: "high", stroke: WHISKER, strokeWidth: 2, inset: cap, className: "whisker-caps" }),
        ...(data.consistent ? [Plot.tickY(shown, { x: "label", y: "consistent", stroke: CONSISTENT, strokeWidth: 3, className: "consistent-marks" })] : []),
      ],
    });
  }

  // Unbiased estimates below zero are drawn as such (the axis extends below its zero line),
  // and the page says why: noise around a nearly empty bin or cell.
  function belowZero(count, what, drawn = "drawn below the zero line") {
    return html("p", { class: "note below-zero" },
      `${count} ${what} estimated below zero: the unbiased estimate of a nearly empty ${what.replace(/s$/, "")} is noise around 0 ` +
      `(${drawn}; its interval is clipped at 0).`);
  }

  const empty = (node) => { node.appendChild(html("p", {}, "No reports in this range.")); return { node, figures: [] }; };
  const hasData = (data) => data.n > 0 && Array.isArray(data.items) && data.items.some((i) => i.estimate !== null);

  // A square wave answer whose EMS stopped at its step limit (the whole range's or any
  // bucket's) carries a warning: shown above the figure, as the CLI starts with it.
  function emsWarning(node, data) {
    const warned = [data.warning, ...(data.buckets || []).map((b) => b.warning)].filter(Boolean);
    if (!warned.length) return;
    const more = warned.length > 1 ? ` (and ${warned.length - 1} more answers)` : "";
    node.appendChild(html("p", { class: "warning", id: "distribution-warning" }, `WARNING: ${warned[0]}${more}`));
  }

  // --- distribution: a histogram on the bounds with whiskers, quantiles marked ---------
  register({
    name: "histogram",
    draw(data, ctx) {
      const node = html("div", { id: "histogram" });
      if (!hasData(data)) return empty(node);
      const qs = data.quantiles || [];
      node.appendChild(html("p", { class: "big", id: "distribution-summary" },
        `mean ${num(data.mean)} [${num(data.mean_low)}, ${num(data.mean_high)}]${shift(data.mean_forgery_shift)}` +
        qs.map((q) => `  ·  p${Math.round(q.q * 100)} ${num(q.value)} [${num(q.low)}, ${num(q.high)}]`).join("")));
      const whose = data.estimand === "population" ? "the population the users were drawn from" : "the reporting users";
      // A square wave answer has point estimates only: say so instead of the intervals' key.
      node.appendChild(data.interval === "none"
        ? html("p", { class: "note", id: "distribution-estimand" }, data.note || "no interval: square wave + EMS is a smoothed estimate")
        : html("p", { class: "crumbs", id: "distribution-estimand" }, `intervals (bins, mean, quantiles): about ${whose} (estimand: ${data.estimand || "population"})`));
      emsWarning(node, data);
      mostCommon(node, data);
      const member = inSet(data);
      const pointsOnly = data.interval === "none";
      node.appendChild(key([
        ...(hasMode(data) ? setKey(data) : [["fraction in the bin", BAR]]),
        ...(pointsOnly ? [] : [[intervalLabel(data), WHISKER, "line"]]),
        [pointsOnly ? "quantile" : "quantile (band: its interval)", CONSISTENT, "line"],
      ]));
      const items = data.items.map((i) => ({ ...i, mid: (i.lower + i.upper) / 2 }));
      // The estimates too: an unbiased estimate may lie below its interval, clipped at 0.
      const values = items.flatMap((i) => [i.estimate, i.low, i.high]).filter((v) => v !== null && v !== undefined);
      const top = Math.max(0.02, ...values) * 1.08;  // room for the quantiles' labels
      const below = items.filter((i) => i.estimate < 0).length;
      if (below) node.appendChild(belowZero(below, "bins"));
      const fig = plot({
        width: ctx.width,
        height: 360,
        marginLeft: 56,
        marginRight: 24,
        marginBottom: 48,
        style: fontStyle(ctx.width),
        x: { domain: data.bounds, label: data.metric, labelAnchor: "center", labelOffset: 38, ticks: endTicks(data.bounds, ctx.width), grid: false },
        y: { domain: [Math.min(0, ...values), top], nice: true, grid: true, label: "fraction of users" },
        marks: [
          ...qs.map((q) => Plot.rectX([q], { x1: "low", x2: "high", y1: 0, y2: top, fill: CONSISTENT, fillOpacity: 0.12, className: "quantile-bands" })),
          Plot.rectY(items, { x1: "lower", x2: "upper", y: "estimate", fill: (i) => (member(i) ? BAR : OTHER), inset: 0.5, className: "estimate-bars",
            title: (i) => `${label(i)}: ${num(i.estimate, 4)} [${num(i.low, 4)}, ${num(i.high, 4)}]${shift(i.forgery_shift, 4)}` }),
          Plot.ruleY([0], { stroke: "#888" }),
          Plot.ruleX(items, { x: "mid", y1: "low", y2: "high", stroke: WHISKER, strokeWidth: 1.5, className: "whiskers" }),
          Plot.ruleX(qs, { x: "value", stroke: CONSISTENT, strokeWidth: 2.5, className: "quantile-marks",
            title: (q) => `q=${q.q}: ${num(q.value)} [${num(q.low)}, ${num(q.high)}]${shift(q.forgery_shift)}` }),
          Plot.text(qs, { x: "value", y: top, text: (q) => `p${Math.round(q.q * 100)}`, dy: 8, dx: 4, textAnchor: "start", fill: CONSISTENT, fontWeight: "bold", className: "quantile-labels" }),
        ],
      });
      node.appendChild(fig);
      return { node, figures: [fig] };
    },
  });

  // --- hierarchy: the nodes of one level; click a bar to open it ------------------------
  // Where the drill-down is: "all › MX › MX/Sonora", every ancestor a button that opens it.
  function breadcrumb(data, ctx) {
    const box = html("p", { class: "crumbs", id: "tree-where" });
    const sep = (ctx.metric && ctx.metric.separator) || "/";
    const parts = data.subtree ? data.subtree.split(sep) : [];
    const crumb = (text, path, current) => {
      if (current || !ctx.open) return html("span", { class: "crumb current" }, text);
      const b = html("button", { type: "button", class: "crumb", "data-path": path === null ? "" : path }, text);
      b.addEventListener("click", () => ctx.open(path));
      return b;
    };
    box.appendChild(crumb("all", null, !data.subtree));
    parts.forEach((part, k) => {
      box.appendChild(html("span", { class: "crumb-sep" }, " › "));
      box.appendChild(crumb(part, parts.slice(0, k + 1).join(sep), k === parts.length - 1));
    });
    const what = ctx.overTime ? "a point" : "a bar";
    box.appendChild(html("span", { class: "crumb-hint" }, ` · depth ${data.depth} · click ${what} to open that node`));
    return box;
  }

  register({
    name: "tree",
    draw(data, ctx) {
      const node = html("div", { id: "tree" });
      node.appendChild(breadcrumb(data, ctx));
      mostCommon(node, data);
      node.appendChild(key([
        ...(hasMode(data) ? setKey(data) : [["unbiased estimate (children add up to their parent)", BAR]]),
        [intervalLabel(data), WHISKER, "line"],
        ...(data.consistent ? [["consistent", CONSISTENT, "line"]] : []),
      ]));
      if (!hasData(data)) return empty(node);
      const fig = bars(data.items, data, ctx, { hint: " (click to open)", member: hasMode(data) ? inSet(data) : null });
      for (const rect of fig.querySelectorAll(".estimate-bars rect")) rect.style.cursor = "pointer";
      fig.addEventListener("click", (event) => {
        const rect = event.target.closest(".estimate-bars rect");
        if (!rect || !ctx.open) return;
        const rects = [...fig.querySelectorAll(".estimate-bars rect")];
        const item = data.items.filter((i) => i.estimate !== null)[rects.indexOf(rect)];
        if (item) ctx.open(item.category);
      });
      node.appendChild(fig);
      return { node, figures: [fig] };
    },
  });

  // --- table: a heat map of the cells, and each marginal as bars ------------------------
  register({
    name: "heatmap",
    draw(data, ctx) {
      const node = html("div", { id: "heatmap" });
      if (!hasData(data) && !(data.n > 0)) return empty(node);
      const [rowDim, colDim] = data.dimensions.map((d) => d[0]);
      const cells = data.items.filter((i) => i.estimate !== null).map((i) => ({
        ...i, row: i.cell[rowDim], col: i.cell[colDim],
        shown: data.consistent ? i.consistent : i.estimate,
      }));
      const figures = [];
      mostCommon(node, data);
      if (data.dimensions.length === 2 && cells.length) {
        node.appendChild(html("h3", {}, `cells: ${rowDim} × ${colDim} (${data.consistent ? "consistent" : "unbiased"} estimate, ${pct(data.level)} ${data.simultaneous ? "simultaneous intervals" : "interval"})`));
        const cols = data.dimensions[1][1], rows = data.dimensions[0][1];
        const darkest = Math.max(...cells.map((c) => c.shown));
        const width = Math.min(ctx.width, 140 + 170 * cols.length);
        const marginLeft = 20 + 8 * Math.max(...rows.map((r) => r.length));
        // A cell narrower than its one-line label ("0.108 [0.079, 0.140]"): two lines.
        const twoLines = (width - marginLeft - 20) / cols.length < 150;
        const below = cells.filter((c) => c.shown < 0).length;
        if (below) node.appendChild(belowZero(below, "cells", "labelled with its value"));
        const fig = plot({
          width,
          height: 60 + (twoLines ? 42 : 34) * rows.length,
          marginLeft,
          marginRight: 20,
          marginTop: 36,
          style: fontStyle(ctx.width),
          x: { domain: cols, axis: "top", label: colDim },
          y: { domain: rows, label: rowDim },
          // No colour legend: every cell is labelled with its value and interval.
          color: { scheme: "blues", domain: [0, Math.max(0.01, ...cells.map((c) => c.shown))] },
          marks: [
            Plot.cell(cells, { x: "col", y: "row", fill: "shown", inset: 1, className: "cells",
              title: (c) => `${label(c)}: ${num(c.estimate, 4)} [${num(c.low, 4)}, ${num(c.high, 4)}]${shift(c.forgery_shift, 4)}` }),
            ...[true, false].map((dark) => Plot.text(cells.filter((c) => (c.shown > 0.55 * darkest) === dark), {
              x: "col", y: "row", text: (c) => `${num(c.shown, 3)}${twoLines ? "\n" : " "}[${num(c.low, 3)}, ${num(c.high, 3)}]`,
              fill: dark ? "white" : "black", className: "cell-labels" })),
          ],
        });
        node.appendChild(fig);
        figures.push(fig);
      }
      for (const [name] of data.dimensions) {
        node.appendChild(html("h3", {}, `marginal: ${name}`));
        const fig = bars(data.marginals[name], data, ctx, { height: 240 });
        fig.setAttribute("data-marginal", name);
        node.appendChild(fig);
        figures.push(fig);
      }
      return { node, figures };
    },
  });

  // --- strings: the top-k found, ranked, with intervals and the threshold ---------------
  // A listing is weak when its evidence (evidence_z) is less than this above the answer's
  // find_z: ldpkit.heavy_hitters.WEAK_MARGIN (docs/statistics.md, "How strong a listing is").
  const WEAK_MARGIN = 1;
  const WEAK = "#A7BFD9";  // the found bars' blue, faded
  const weak = (r, data) => r.kind === "found" && r.evidence_z !== null && r.evidence_z !== undefined
    && data.find_z !== null && data.find_z !== undefined && r.evidence_z < data.find_z + WEAK_MARGIN;
  function evidence(r, data) {
    if (r.evidence_z === null || r.evidence_z === undefined) return "";
    const found = data.find_z === null || data.find_z === undefined ? "" : `; found from ${num(data.find_z, 2)}`;
    return `\nevidence z ${num(r.evidence_z, 2)}${found}${weak(r, data) ? " (weak: could be a string nobody holds)" : ""}`;
  }
  register({
    name: "ranked",
    draw(data, ctx) {
      const node = html("div", { id: "ranked" });
      node.appendChild(html("p", { id: "threshold" },
        `threshold ${num(data.threshold, 4)}: no string less frequent than this can be found at ε=${data.epsilon} and n=${data.n}` +
        (data.items.length ? "" : " (none stood out: an empty list does not mean nothing is popular)")));
      const rows = [...data.items.map((i) => ({ ...i, kind: "found" })),
        ...(data.candidates || []).map((i) => ({ ...i, kind: "asked" }))].filter((i) => i.estimate !== null);
      if (!rows.length) return { node, figures: [] };
      const anyWeak = rows.some((r) => weak(r, data));
      if (anyWeak) {
        node.appendChild(html("p", { id: "weak-note" },
          `"(weak)": found on evidence less than ${WEAK_MARGIN} z above the least a string needs (${num(data.find_z, 2)}); ` +
          "a string nobody holds that passes the find test lands there. Hover a bar for its evidence."));
      }
      node.appendChild(key([
        ["found (top-k)", BAR],
        ...(anyWeak ? [["found, weak evidence", WEAK]] : []),
        ["named candidate", CONSISTENT],
        [intervalLabel(data), WHISKER, "line"],
        ["threshold", "#B00", "line"],
      ]));
      const names = rows.map((r) => (r.kind === "asked" ? `${r.category} (asked)` : weak(r, data) ? `${r.category} (weak)` : r.category));
      rows.forEach((r, k) => { r.name = names[k]; });
      const values = rows.flatMap((r) => [r.low, r.high]);
      const fig = plot({
        width: ctx.width,
        height: 40 + 26 * rows.length,
        marginLeft: 12 + 7.5 * Math.min(40, Math.max(...names.map((n) => n.length))),
        marginRight: 24,
        style: fontStyle(ctx.width),
        y: { domain: names, label: null },
        x: { domain: [Math.min(0, ...values), Math.max(data.threshold || 0, ...values)], nice: true, grid: true, label: "fraction of users", axis: "top" },
        marks: [
          Plot.barX(rows, { y: "name", x: "estimate", fill: (r) => (r.kind === "asked" ? CONSISTENT : weak(r, data) ? WEAK : BAR),
            className: "estimate-bars",
            title: (r) => `${r.category}: ${num(r.estimate, 4)} [${num(r.low, 4)}, ${num(r.high, 4)}]${shift(r.forgery_shift, 4)}${evidence(r, data)}` }),
          Plot.ruleY(rows, { y: "name", x1: "low", x2: "high", stroke: WHISKER, strokeWidth: 2, className: "whiskers" }),
          Plot.ruleX([data.threshold], { stroke: "#B00", strokeDasharray: "4,3", className: "threshold" }),
          Plot.ruleX([0], { stroke: "#888" }),
        ],
      });
      node.appendChild(fig);
      return { node, figures: [fig] };
    },
  });

  // --- categorical: bars with interval whiskers per category ---------------------------
  register({
    name: "categories",
    applies: (data, ctx) => Array.isArray(data.items) && !ctx.overTime,
    draw(data, ctx) {
      const items = data.items.filter((i) => i.estimate !== null);
      const node = html("div", { id: "bars" });
      mostCommon(node, data);
      const member = inSet(data);
      node.appendChild(key([
        ...setKey(data),
        [intervalLabel(data), WHISKER, "line"],
        ...(data.consistent ? [["consistent (Norm-Sub)", CONSISTENT, "line"]] : []),
        ...(data.robust ? [[robustLabel(data), ROBUST, "line"]] : []),
      ]));
      if (!items.length) {
        node.appendChild(html("p", {}, "No reports in this range."));
        return { node, figures: [] };
      }
      const values = items.flatMap((i) => [i.low, i.high, i.consistent, i.robust_low, i.robust_high]).filter((v) => v !== null && v !== undefined);
      const names = data.items.map((i) => i.category);
      const longest = Math.max(...names.map((n) => n.length));
      // Bars no wider than a person reads as bars; caps about 18 px wide.
      const width = Math.min(ctx.width, 150 * names.length + 120);
      const rotate = names.length * Math.max(longest, 4) * 7.5 > width - 70;
      const band = ((width - 72) / names.length) * 0.75;
      const cap = Math.max(0, band / 2 - 9);
      // The robust interval beside the unbiased one (it contains it), not over it.
      const aside = Math.min(8, band / 4);
      const fig = plot({
        width,
        height: 340,
        marginLeft: 56,
        marginRight: 16,
        marginBottom: rotate ? 16 + 6.5 * Math.min(longest, 18) : 36,
        style: fontStyle(ctx.width),
        x: { domain: names, label: null, tickRotate: rotate ? -40 : 0, padding: 0.25 },
        y: { domain: [Math.min(0, ...values), Math.max(0.05, ...values)], nice: true, grid: true, label: "fraction of users" },
        marks: [
          Plot.barY(items, { x: "category", y: "estimate", fill: (i) => (member(i) ? BAR : OTHER), className: "estimate-bars",
            title: (i) => `${i.category}: ${num(i.estimate, 4)} [${num(i.low, 4)}, ${num(i.high, 4)}]${shift(i.forgery_shift, 4)}` +
              robustTitle(i.robust, i.robust_low, i.robust_high, i.robust_forgery_shift) + (hasMode(data) && member(i) ? " · could be the most common" : "") }),
          Plot.ruleY([0], { stroke: "#888" }),
          Plot.ruleX(items, { x: "category", y1: "low", y2: "high", stroke: WHISKER, strokeWidth: 2, className: "whiskers" }),
          Plot.tickY(items, { x: "category", y: "low", stroke: WHISKER, strokeWidth: 2, inset: cap, className: "whisker-caps" }),
          Plot.tickY(items, { x: "category", y: "high", stroke: WHISKER, strokeWidth: 2, inset: cap, className: "whisker-caps" }),
          ...(data.consistent ? [Plot.tickY(items, { x: "category", y: "consistent", stroke: CONSISTENT, strokeWidth: 3, className: "consistent-marks" })] : []),
          ...(data.robust ? [
            Plot.ruleX(items, { x: "category", y1: "robust_low", y2: "robust_high", dx: aside, stroke: ROBUST, strokeWidth: 2, className: "robust-whiskers" }),
            ...["robust_low", "robust_high"].map((y) => Plot.tickY(items, { x: "category", y, dx: aside, inset: Math.max(0, band / 2 - 5), stroke: ROBUST, strokeWidth: 2, className: "robust-caps" })),
            Plot.dot(items, { x: "category", y: "robust", dx: aside, r: 3.5, fill: ROBUST, stroke: "white", className: "robust-marks" }),
          ] : []),
        ],
      });
      node.appendChild(fig);
      return { node, figures: [fig] };
    },
  });

  // --- numeric: the mean with its interval, on the bounds axis and zoomed in -----------
  register({
    name: "mean",
    applies: (data, ctx) => !Array.isArray(data.items) && !ctx.overTime,
    draw(data, ctx) {
      const node = html("div", { id: "mean" });
      if (data.mean === null || data.mean === undefined) {
        node.appendChild(html("p", {}, "No reports in this range."));
        return { node, figures: [] };
      }
      node.appendChild(html("p", { class: "big", id: "mean-value" },
        `mean ${num(data.mean)}  ·  ${pct(data.level)} interval [${num(data.low)}, ${num(data.high)}]` +
        (data.forgery_shift === null || data.forgery_shift === undefined ? "" : `  ·  forgery shift ±${num(data.forgery_shift)}`)));
      if (data.beyond_bounds) node.appendChild(html("p", { class: "warning", id: "beyond-bounds" }, beyond(data)));
      const bounds = ctx.metric && ctx.metric.bounds ? ctx.metric.bounds : [data.low, data.high];
      const row = [{ mean: data.mean, low: data.low, high: data.high, y: "mean" }];
      // The robust mean (clamped to the bounds) and its interval: a second row, in green.
      const robust = data.robust && data.robust.mean !== null ? [{ ...data.robust, y: "robust" }] : [];
      if (robust.length) {
        node.appendChild(html("p", { id: "robust-value" },
          `robust mean ${num(data.robust.mean)}  ·  interval [${num(data.robust.low)}, ${num(data.robust.high)}] for the genuine reporters, up to ` +
          `${+(data.robust.forgery_fraction * 100).toPrecision(6)}% forged${shift(data.robust.forgery_shift)}` +
          // Wholly beyond the bounds: more forged reports than assumed (or a miss).
          (data.robust.low >= bounds[1] || data.robust.high <= bounds[0] ? "; it too lies beyond the bounds: more of the reports are forged than that" : "")));
        node.appendChild(key([["unbiased mean and interval", WHISKER, "line"], [robustLabel(data), ROBUST, "line"]]));
      }
      const all = [...row, ...robust];
      const lows = all.map((r) => r.low), highs = all.map((r) => r.high);
      const strip = (title, domain, id, ends) => {
        node.appendChild(html("h3", {}, title));
        const fig = plot({
          width: ctx.width,
          height: 96 + 28 * robust.length,
          marginLeft: 24,
          marginRight: 24,
          marginTop: 12,
          marginBottom: 36,
          style: fontStyle(ctx.width),
          x: { domain, grid: true, label: null, nice: false, ...(ends ? { ticks: endTicks(domain, ctx.width) } : {}) },
          y: { axis: null, domain: all.map((r) => r.y) },
          marks: [
            Plot.ruleY(row, { x1: "low", x2: "high", y: "y", stroke: WHISKER, strokeWidth: 3, className: "interval" }),
            Plot.tickX(row, { x: "low", y: "y", stroke: WHISKER, strokeWidth: 2 }),
            Plot.tickX(row, { x: "high", y: "y", stroke: WHISKER, strokeWidth: 2 }),
            Plot.dot(row, { x: "mean", y: "y", r: 7, fill: BAR, stroke: "white", className: "mean-dot",
              title: (d) => `mean ${num(d.mean)} [${num(d.low)}, ${num(d.high)}]${shift(data.forgery_shift)}` }),
            ...(robust.length ? [
              Plot.ruleY(robust, { x1: "low", x2: "high", y: "y", stroke: ROBUST, strokeWidth: 3, className: "robust-interval" }),
              Plot.tickX(robust, { x: "low", y: "y", stroke: ROBUST, strokeWidth: 2 }),
              Plot.tickX(robust, { x: "high", y: "y", stroke: ROBUST, strokeWidth: 2 }),
              Plot.dot(robust, { x: "mean", y: "y", r: 6, fill: ROBUST, stroke: "white", className: "robust-dot",
                title: (d) => `robust mean ${num(d.mean)} [${num(d.low)}, ${num(d.high)}]${shift(d.forgery_shift)}` }),
            ] : []),
            // The bounds, where the interval lies beyond them: the estimand is within.
            ...(ends && data.beyond_bounds ? [Plot.ruleX(bounds, { stroke: "#B00", strokeDasharray: "4,3", className: "bounds" })] : []),
          ],
        });
        fig.setAttribute("id", id);
        node.appendChild(fig);
        return fig;
      };
      const whole = strip(`on the metric's bounds [${bounds[0]}, ${bounds[1]}]`, [Math.min(bounds[0], ...lows), Math.max(bounds[1], ...highs)], "mean-bounds", true);
      // The interval at a readable size: about half the width, the mean in the middle.
      const means = all.map((r) => r.mean);
      const [low, high] = [Math.min(...lows, ...means), Math.max(...highs, ...means)];
      const half = Math.max(high - low, 1e-9);
      const zoom = strip("zoomed on the interval", [low - half * 0.5, high + half * 0.5], "mean-zoom", false);
      return { node, figures: [whole, zoom] };
    },
  });

  // --- over time: estimates per bucket, interval bands, a colour legend ----------------
  function overTimeRows(data) {
    if (Array.isArray(data.items)) {
      return data.buckets.flatMap((b) => {
        const member = inSet(b);  // in the bucket's own most common set (all without one)
        return (b.items || []).filter((i) => i.estimate !== null).map((i) => ({
          t: new Date(b.bucket * 1000), series: label(i), estimate: i.estimate, low: i.low, high: i.high, stderr: i.stderr, n: b.n,
          member: member(i), marked: hasMode(b),
        }));
      });
    }
    return data.buckets.filter((b) => b.mean !== null && b.mean !== undefined).map((b) => ({
      t: new Date(b.bucket * 1000), series: "mean", estimate: b.mean, low: b.low, high: b.high, stderr: b.stderr, n: b.n,
    }));
  }

  // Estimates per bucket as lines, one colour per series, intervals as bands and whiskers.
  function linesOverTime(rows, series, ctx, opts) {
    const times = [...new Set(rows.map((r) => +r.t))].sort((a, b) => a - b);
    const colours = palette(series.length);
    // Each series side by side in a bucket, so none hides another: its band, whiskers, line
    // and points all shifted by the same few pixels (points on their own whiskers).
    const step = Math.min(5, 36 / Math.max(series.length, 1));
    const per = (make) => series.map((s, k) => make(rows.filter((r) => r.series === s), (k - (series.length - 1) / 2) * step, colours[k]));
    const bands = times.length > 1 ? per((part, dx) => Plot.areaY(part, { x: "t", y1: "low", y2: "high", fill: "series", fillOpacity: series.length > 6 ? 0.06 : 0.14, dx, className: "bands" })) : [];
    const whiskers = per((part, dx) => Plot.ruleX(part, {
      x: "t", y1: "low", y2: "high", stroke: "series", strokeOpacity: 0.7, strokeWidth: 1.5, dx, className: "whiskers",
    }));
    const lines = per((part, dx) => Plot.lineY(part, { x: "t", y: "estimate", stroke: "series", strokeWidth: 2, dx, className: "lines" }));
    // A point is filled when its item could be its bucket's most common, hollow when not
    // (the bucket's `most_common` set); filled in every bucket without one.
    const points = per((part, dx, colour) => Plot.dot(part, { x: "t", y: "estimate", r: 3.5, dx, className: "points",
      fill: { value: (r) => (r.member === false ? "white" : colour), scale: null }, stroke: colour, strokeWidth: 1.5,
      title: (r) => `${r.series}, ${r.t.toISOString().slice(0, 16).replace("T", " ")} UTC: ${num(r.estimate, 4)} [${num(r.low, 4)}, ${num(r.high, 4)}], stderr ${num(r.stderr, 4)}, n=${r.n}` +
        (r.marked ? (r.member ? " · could be the bucket's most common" : " · less common than one of the bucket's") : "") }));
    // The estimates too: an unbiased estimate may lie outside its interval, clipped at 0.
    const values = rows.flatMap((r) => [r.estimate, r.low, r.high]).filter((v) => v !== null && v !== undefined);
    const pad = times.length > 1 ? 0 : 12 * 3600 * 1000;  // one bucket: room around it
    const fig = plot({
      width: ctx.width,
      height: opts.height || 360,
      marginLeft: 60,
      marginRight: 36,
      marginBottom: 46,
      // The side-by-side whiskers of the first and last buckets stay inside the plot area.
      insetLeft: Math.max(14, (step * (series.length - 1)) / 2 + 6),
      insetRight: Math.max(14, (step * (series.length - 1)) / 2 + 6),
      insetTop: 6,  // the points at the top and bottom stay inside the plot area
      insetBottom: 6,
      style: fontStyle(ctx.width),
      x: { type: "utc", label: "bucket start (UTC)", labelAnchor: "center", labelOffset: 36, domain: [new Date(times[0] - pad), new Date(times[times.length - 1] + pad)],
        ticks: Math.max(2, Math.min(times.length, Math.floor(ctx.width / 110))) },
      y: { grid: true, nice: true, label: opts.yLabel,
        domain: [Math.min(0, ...values), Math.max(...values)] },
      color: { domain: series, range: colours, legend: true, label: null },
      marks: [
        ...bands,
        ...whiskers,
        ...(Math.min(...values) < 0 ? [Plot.ruleY([0], { stroke: "#888", className: "zero" })] : []),
        ...lines,
        ...points,
      ],
    });
    if (opts.pick) {  // a click on a series' point: that series (a hierarchy opens the node)
      fig.querySelectorAll("g.points").forEach((g, k) => {
        g.style.cursor = "pointer";
        g.addEventListener("click", () => opts.pick(series[k]));
      });
    }
    return fig;
  }

  register({
    name: "over-time",
    applies: (data, ctx) => ctx.overTime && Array.isArray(data.buckets),
    draw: (data, ctx) => overTime(html("div", { id: "over-time-chart" }), data, ctx, {}),
  });

  // A hierarchy over time: where the drill-down is (as in its single view), then its nodes'
  // lines; a click on a node's point opens it.
  register({
    name: "tree-over-time",
    draw(data, ctx) {
      const node = html("div", { id: "over-time-chart" });
      node.appendChild(breadcrumb(data, ctx));
      return overTime(node, data, ctx, { pick: ctx.open ? (path) => ctx.open(path) : null });
    },
  });

  function overTime(node, data, ctx, opts) {
    const rows = overTimeRows(data);
    // The whole range's items first, then any only some buckets have (strings found there).
    const series = Array.isArray(data.items) ? [...new Set([...data.items.map(label), ...rows.map((r) => r.series)])] : ["mean"];
    if (!rows.length) {
      node.appendChild(html("p", {}, "No reports in this range."));
      return { node, figures: [] };
    }
    const below = rows.filter((r) => r.estimate < 0).length;
    if (below && Array.isArray(data.items)) node.appendChild(belowZero(below, "estimates"));
    const times = new Set(rows.map((r) => +r.t));
    mostCommon(node, data);  // the whole range's; each bucket's by its points
    node.appendChild(key([[`${intervalLabel(data)}: ${times.size > 1 ? "band and whisker" : "whisker"}`, "#999", "line"], ...bucketSetKey(data)]));
    const fig = linesOverTime(rows, series, ctx, { yLabel: Array.isArray(data.items) ? "fraction of users" : "mean", pick: opts.pick });
    node.appendChild(fig);
    return { node, figures: [fig] };
  }

  // --- distribution over time: the mean and the quantiles asked per bucket with their
  // intervals, and a bucket × bin heat map of the fractions (not one line per bin) -------
  const bucketName = (t) => {
    const iso = new Date(t * 1000).toISOString();
    return iso.endsWith("T00:00:00.000Z") ? iso.slice(0, 10) : iso.slice(0, 16).replace("T", " ");
  };
  // At most one tick label per `room` px: every k-th of a band scale's values.
  const thinned = (values, span, room) => {
    const k = Math.max(1, Math.ceil((values.length * room) / Math.max(span, 1)));
    return values.filter((_, i) => i % k === 0);
  };

  function summaryOverTime(node, data, buckets, ctx) {
    const rows = buckets.flatMap((b) => [
      { t: new Date(b.bucket * 1000), series: "mean", value: b.mean, low: b.mean_low, high: b.mean_high, stderr: b.mean_stderr, n: b.n },
      ...(b.quantiles || []).map((q) => ({ t: new Date(b.bucket * 1000), series: `p${+(q.q * 100).toPrecision(4)}`, value: q.value, low: q.low, high: q.high, n: b.n })),
    ]).filter((r) => r.value !== null && r.value !== undefined);
    const series = [...new Set(rows.map((r) => r.series))];
    const times = [...new Set(rows.map((r) => +r.t))].sort((a, b) => a - b);
    const values = rows.flatMap((r) => [r.value, r.low, r.high]).filter((v) => v !== null && v !== undefined);
    const pad = times.length > 1 ? 0 : 12 * 3600 * 1000;
    const step = Math.min(6, 30 / series.length);  // whiskers side by side in a bucket
    node.appendChild(html("h3", {}, `mean and quantiles per bucket (${pct(data.level)} intervals${times.length > 1 ? ": bands and whiskers" : ""})`));
    const fig = plot({
      width: ctx.width,
      height: 320,
      marginLeft: 60,
      marginRight: 36,
      marginBottom: 46,
      insetLeft: 14,
      insetRight: 14,
      insetTop: 6,
      insetBottom: 6,
      style: fontStyle(ctx.width),
      x: { type: "utc", label: "bucket start (UTC)", labelAnchor: "center", labelOffset: 36,
        domain: [new Date(times[0] - pad), new Date(times[times.length - 1] + pad)],
        ticks: Math.max(2, Math.min(times.length, Math.floor(ctx.width / 110))) },
      y: { grid: true, nice: true, label: data.metric, domain: [Math.min(...values), Math.max(...values)] },
      color: { domain: series, range: palette(series.length), legend: true, label: null },
      marks: [
        ...(times.length > 1 ? [Plot.areaY(rows, { x: "t", y1: "low", y2: "high", z: "series", fill: "series", fillOpacity: 0.12, className: "bands" })] : []),
        ...series.map((s, k) => Plot.ruleX(rows.filter((r) => r.series === s), {
          x: "t", y1: "low", y2: "high", stroke: "series", strokeWidth: 1.5, dx: (k - (series.length - 1) / 2) * step, className: "whiskers" })),
        ...series.map((s, k) => Plot.lineY(rows.filter((r) => r.series === s), {
          x: "t", y: "value", stroke: "series", strokeWidth: 2, dx: (k - (series.length - 1) / 2) * step, className: "lines" })),
        ...series.map((s, k) => Plot.dot(rows.filter((r) => r.series === s), {
          x: "t", y: "value", fill: "series", r: 3.5, dx: (k - (series.length - 1) / 2) * step, className: "points",
          title: (r) => `${r.series}, ${bucketName(+r.t / 1000)} UTC: ${num(r.value)} [${num(r.low)}, ${num(r.high)}]` +
            (r.stderr === undefined ? "" : `, stderr ${num(r.stderr, 4)}`) + `, n=${r.n}` })),
      ],
    });
    fig.setAttribute("id", "distribution-summary-over-time");
    node.appendChild(fig);
    return fig;
  }

  // A bucket × item heat map of the unbiased estimates (a distribution's bins, a table's
  // cells): blue above zero, red below, each cell labelled when there is room.
  function bucketHeatMap(node, buckets, ctx, opts) {
    const cells = buckets.flatMap((b) => {
      const member = hasMode(b) ? inSet(b) : () => false;  // each bucket's own set, outlined
      return (b.items || []).filter((i) => i.estimate !== null).map((i) => ({
        ...i, bucket: bucketName(b.bucket), item: label(i), n: b.n, member: member(i) }));
    });
    const names = buckets.map((b) => bucketName(b.bucket));
    const items = (buckets[0].items || []).map(label);
    if (opts.reverse) items.reverse();  // a distribution's highest bin on top
    const lowest = Math.min(...cells.map((c) => c.estimate)), highest = Math.max(0.01, ...cells.map((c) => c.estimate));
    const below = cells.filter((c) => c.estimate < 0).length;
    node.appendChild(html("h3", {}, `${opts.title} (unbiased estimate${below ? "; red: below zero" : ""})`));
    if (below) node.appendChild(belowZero(below, opts.what, "red in the heat map"));
    const outlined = cells.filter((c) => c.member);
    if (outlined.length) node.appendChild(key(bucketSetKey({ buckets }, true)));
    const rowHeight = items.length <= 16 ? 22 : items.length <= 32 ? 14 : 8;
    const marginLeft = 16 + (ctx.width < 520 ? 7 : 8.2) * Math.max(...items.map((b) => b.length));
    const width = Math.min(ctx.width, marginLeft + 24 + 160 * names.length);
    const band = (width - marginLeft - 24) / names.length;
    const labelled = band >= 48 && rowHeight >= 14;
    // Below zero in red, above in blue (one scale, symmetric about 0): an estimate below
    // zero reads as one. Its legend drawn apart, with room for the end labels.
    const reach = Math.max(highest, -lowest);
    const colour = lowest < 0 ? { type: "diverging", scheme: "rdbu", pivot: 0, domain: [-reach, reach], label: "fraction of users" }
      : { scheme: "blues", domain: [0, highest], label: "fraction of users" };
    node.appendChild(Plot.legend({ color: colour, width: Math.min(320, ctx.width - 20), marginLeft: 16, marginRight: 16, className: "heat-legend" }));
    const fig = plot({
      width,
      height: 70 + rowHeight * items.length,
      marginLeft,
      marginRight: 24,
      marginTop: 8,
      marginBottom: 46,
      style: fontStyle(ctx.width),
      x: { domain: names, label: "bucket start (UTC)", labelAnchor: "center", labelOffset: 36, ticks: thinned(names, width - marginLeft - 24, 90), padding: 0 },
      y: { domain: items, label: opts.yLabel, ticks: thinned(items, rowHeight * items.length, 16) },
      color: colour,
      marks: [
        Plot.cell(cells, { x: "bucket", y: "item", fill: "estimate", inset: 0.5, className: "bin-cells",
          title: (c) => `${c.bucket} UTC, ${c.item}: ${num(c.estimate, 4)} [${num(c.low, 4)}, ${num(c.high, 4)}], stderr ${num(c.stderr, 4)}, n=${c.n}` }),
        ...(labelled ? [true, false].map((dark) => Plot.text(cells.filter((c) => (Math.abs(c.estimate) > 0.55 * reach) === dark), {
          x: "bucket", y: "item", text: (c) => num(c.estimate, 3), fill: dark ? "white" : "black", className: "bin-labels" })) : []),
        Plot.cell(outlined, { x: "bucket", y: "item", fill: "none", stroke: "#222", strokeWidth: 2, inset: 1.5, className: "most-common-cells" }),
      ],
    });
    fig.setAttribute("id", opts.id);
    node.appendChild(fig);
    return fig;
  }

  register({
    name: "distribution-over-time",
    draw(data, ctx) {
      const node = html("div", { id: "distribution-over-time" });
      const buckets = (data.buckets || []).filter((b) => b.n > 0 && Array.isArray(b.items) && b.items.some((i) => i.estimate !== null));
      if (!buckets.length) return empty(node);
      emsWarning(node, data);
      mostCommon(node, data);  // the whole range's; each bucket's outlined in the heat map
      const heat = bucketHeatMap(node, buckets, ctx, {
        title: "fraction of users per bin and bucket", what: "bins", yLabel: data.metric, id: "distribution-heatmap", reverse: true });
      return { node, figures: [summaryOverTime(node, data, buckets, ctx), heat] };
    },
  });

  // --- a table over time: each marginal as lines, the cells as a bucket × cell heat map ---
  register({
    name: "table-over-time",
    draw(data, ctx) {
      const node = html("div", { id: "table-over-time" });
      const buckets = (data.buckets || []).filter((b) => b.n > 0 && Array.isArray(b.items) && b.items.some((i) => i.estimate !== null));
      if (!buckets.length) return empty(node);
      mostCommon(node, data);  // the whole range's cell; each bucket's outlined in the heat map
      node.appendChild(key([[`${intervalLabel(data)}: ${buckets.length > 1 ? "band and whisker" : "whisker"}`, "#999", "line"]]));
      const figures = [];
      for (const [name, categories] of data.dimensions) {
        const rows = buckets.flatMap((b) => ((b.marginals || {})[name] || []).filter((i) => i.estimate !== null).map((i) => ({
          t: new Date(b.bucket * 1000), series: i.category, estimate: i.estimate, low: i.low, high: i.high, stderr: i.stderr, n: b.n })));
        node.appendChild(html("h3", {}, `marginal: ${name}`));
        const fig = linesOverTime(rows, categories, ctx, { yLabel: "fraction of users", height: 280 });
        fig.setAttribute("data-marginal", name);
        node.appendChild(fig);
        figures.push(fig);
      }
      const cells = buckets.map((b) => ({ ...b, items: b.items.map((i) => ({ ...i, category: Object.values(i.cell).join(", ") })) }));
      figures.push(bucketHeatMap(node, cells, ctx, {
        title: `cells (${data.dimensions.map((d) => d[0]).join(", ")}) per bucket`, what: "cells", yLabel: null, id: "cells-heatmap" }));
      return { node, figures };
    },
  });

  return { register, pick, views, label, kind };
})();
