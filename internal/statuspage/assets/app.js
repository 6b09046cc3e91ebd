// Sluice status page: polls /ui/api every second and renders it. Every
// value from the server goes through textContent (descriptor values come
// from end clients and must never be parsed as HTML).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function num(x) {
  if (x >= 100) return Math.round(x).toLocaleString("en");
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2).replace(/\.?0+$/, "") || "0";
}
const pct = (x) => (x * 100).toFixed(x > 0 && x < 0.1 ? 1 : 0) + "%";
const ms = (x) => (x >= 10 ? x.toFixed(0) : x.toFixed(2)) + " ms";

function ago(iso, now) {
  const t = Date.parse(iso);
  if (!t || t < 0) return "never";
  const s = Math.max(0, Math.round((Date.parse(now) - t) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return new Date(t).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}
const isSet = (iso) => iso && Date.parse(iso) > 0;

// chart draws a series as an area and an optional second series as a line,
// on one scale, as an inline SVG.
function chart(values, line, label) {
  const w = 300, h = 56, n = values.length;
  const top = Math.max(1, ...values, ...(line || []));
  const x = (i) => (i * w) / Math.max(1, n - 1);
  const y = (v) => h - 2 - (v / top) * (h - 6);
  const pts = values.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const axis = document.createElementNS(SVG, "line");
  Object.entries({ x1: 0, x2: w, y1: h - 1, y2: h - 1, class: "axis" }).forEach(([k, v]) => axis.setAttribute(k, v));
  svg.append(axis);
  const area = document.createElementNS(SVG, "polygon");
  area.setAttribute("points", `0,${h - 2} ${pts.join(" ")} ${w},${h - 2}`);
  area.setAttribute("class", "area");
  svg.append(area);
  if (line) {
    const pl = document.createElementNS(SVG, "polyline");
    pl.setAttribute("points", line.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" "));
    pl.setAttribute("class", "over");
    svg.append(pl);
  }
  return svg;
}

function stat(label, value, field, bad) {
  return el("div", {}, el("dt", {}, label), el("dd", { "data-field": field, class: bad ? "bad" : "" }, value));
}

// EMPTY marks an empty value in a top-values label, so that it shows as
// something rather than as nothing.
const EMPTY = "(empty)";

// valueLabel renders a top-values label ("key=value, key=value"): an empty
// value after "=", or an empty label (the rule fixes every value of the
// descriptor), shows as a styled "(empty)".
function valueLabel(v) {
  const td = el("td", { class: "value mono", title: v === "" ? "empty: the rule fixes every value of these descriptors" : v });
  if (v === "") {
    td.append(el("span", { class: "none" }, EMPTY));
    return td;
  }
  const parts = v.split(/(=)(?=, |$)/);
  for (let i = 0; i < parts.length; i++) {
    td.append(parts[i]);
    if (parts[i] === "=") td.append(el("span", { class: "none" }, EMPTY));
  }
  return td;
}

// busy reports whether a rule had traffic in the last minute: its chart
// shows decisions, or it had hits given back.
const busy = (r) => r.decisions.some((n) => n > 0) || r.refunded_per_s > 0;

// idleCard is the compact card of a rule without traffic in the last
// minute: its name and limit only.
function idleCard(r) {
  const id = r.domain + "/" + r.rule;
  const tags = el("span", { class: "small muted" }, r.limit + (r.algorithm ? " · " + r.algorithm : ""));
  if (r.shadow) tags.append(" ", el("span", { class: "pill shadow" }, "shadow"));
  return el("article", { class: "card rule idle", "data-rule": id, "data-idle": "" },
    el("h3", {}, el("span", { class: "muted" }, r.domain + " / "), r.rule), tags);
}

function ruleCard(r, topN) {
  const id = r.domain + "/" + r.rule;
  const title = el("h3", {}, el("span", { class: "muted" }, r.domain + " / "), r.rule);
  const tags = el("span", { class: "small muted" }, r.limit + (r.algorithm ? " · " + r.algorithm : ""));
  if (r.shadow) tags.append(" ", el("span", { class: "pill shadow" }, "shadow"));
  const stats = el("dl", { class: "stats" },
    stat("decisions/s", num(r.decisions_per_s), "decisions"),
    stat("hits/s", num(r.hits_per_s), "hits"),
    stat("over limit", pct(r.over_share), "over", r.over_share > 0),
    stat("near limit", pct(r.near_share), "near"));
  // Hits given back are not hits: a concurrency limit's releases, or
  // refunds of any other limit, shown beside them when there are any.
  const concurrency = (r.algorithm || "").split(", ").includes("concurrency");
  if (concurrency || r.refunded_per_s > 0) {
    stats.append(stat(concurrency ? "released/s" : "refunded/s", num(r.refunded_per_s), "refunded"));
  }
  const card = el("article", { class: "card rule", "data-rule": id },
    el("header", {}, title, tags),
    stats,
    el("div", { class: "chart" }, chart(r.decisions, r.over, `decisions and over-limit hits per second, last 60 s, ${id}`)),
    el("div", { class: "legend" }, el("span", { class: "d" }, "decisions/s"), el("span", { class: "o" }, "over-limit hits/s")));
  if (r.classes && r.classes.length) {
    // A pool's classes: what its ceiling admitted of each, and shed.
    const body = el("tbody", {});
    for (const c of r.classes) {
      body.append(el("tr", {},
        el("td", {}, c.class),
        el("td", { class: "num" }, c.ceiling),
        el("td", { class: "num" }, num(c.admitted_per_s)),
        el("td", { class: "num" + (c.shed_per_s > 0 ? " bad" : "") }, num(c.shed_per_s))));
    }
    card.append(el("table", { "data-field": "classes" },
      el("thead", {}, el("tr", {}, el("th", {}, "class"), el("th", { class: "num" }, "ceiling"),
        el("th", { class: "num" }, "admitted/s"), el("th", { class: "num" }, "shed/s"))),
      body));
  }
  if (r.values_hidden) {
    card.append(el("p", { class: "empty", "data-field": "top" }, "values not recorded: rule marked sensitive"));
  } else if (topN === 0) {
    card.append(el("p", { class: "empty", "data-field": "top" }, "values not shown (they are often API keys): --ui-top-values=N shows the top N"));
  } else if (!r.top.length) {
    card.append(el("p", { class: "empty", "data-field": "top" }, "no traffic in the last minute"));
  } else {
    const body = el("tbody", {});
    for (const t of r.top) {
      body.append(el("tr", {},
        valueLabel(t.value),
        el("td", { class: "num" }, t.hits.toLocaleString("en")),
        el("td", { class: "num" + (t.over ? " bad" : "") }, t.over.toLocaleString("en"))));
    }
    card.append(el("table", { "data-field": "top" },
      el("thead", {}, el("tr", {}, el("th", {}, "top values, last 30–60 s"), el("th", { class: "num" }, "hits"), el("th", { class: "num" }, "over limit"))),
      body));
  }
  return card;
}

function renderStore(s) {
  const pill = $("store-pill");
  pill.textContent = (s.kind || "store") + (s.healthy ? " healthy" : " unreachable");
  pill.className = "pill " + (s.healthy ? "ok" : "bad");
  $("store-calls").textContent = num(s.calls_per_s);
  $("store-errors").textContent = num(s.errors_per_s);
  $("store-errors").className = s.errors_per_s > 0 ? "bad" : "";
  $("store-p50").textContent = ms(s.p50_ms);
  $("store-p99").textContent = ms(s.p99_ms);
  $("store-chart").replaceChildren(chart(s.calls, s.errors, "store calls and errors per second, last 60 s"));
  $("store-reason").hidden = s.healthy;
  $("store-reason").textContent = s.reason || "";
}

function renderConfig(c, now) {
  const pill = $("config-pill");
  const failed = c.errors && c.errors.length;
  pill.textContent = failed ? "config: last load failed" : (c.version ? "config " + c.version.slice(0, 8) : "no config");
  pill.className = "pill " + (failed || !c.version ? "bad" : "ok");
  $("config-source").textContent = c.source || "–";
  $("config-version").textContent = c.version || "none loaded";
  $("config-loaded").textContent = isSet(c.loaded_at) ? ago(c.loaded_at, now) : "never";
  const errs = $("config-errors");
  errs.hidden = !failed;
  errs.replaceChildren();
  if (failed) {
    errs.append(el("p", {}, "last load failed " + ago(c.error_at, now) + "; the config above keeps serving:"));
    const ul = el("ul", {});
    for (const e of c.errors) ul.append(el("li", { class: "mono" }, e));
    errs.append(ul);
  }
}

function render(v) {
  renderStore(v.store);
  const le = $("store-lasterr");
  le.hidden = !v.store.last_error;
  le.textContent = v.store.last_error ? "last error " + ago(v.store.last_error_at, v.now) + ": " + v.store.last_error : "";
  renderConfig(v.config, v.now);
  // Rules with traffic first, in full; the idle ones after them, compact,
  // so that a busy rule is not pushed down the page by idle ones.
  const active = v.rules.filter(busy), idle = v.rules.filter((r) => !busy(r));
  const rules = $("rules");
  rules.replaceChildren(...active.map((r) => ruleCard(r, v.top_values)));
  if (!v.rules.length) rules.append(el("p", { class: "empty" }, "no limited rule in the config in force"));
  else if (!active.length) rules.append(el("p", { class: "empty" }, "no traffic on any rule in the last minute"));
  $("idle-section").hidden = !idle.length;
  $("idle-count").textContent = idle.length === 1 ? "1 rule" : idle.length + " rules";
  $("idle").replaceChildren(...idle.map(idleCard));
  $("dropped").hidden = !v.dropped_rules;
  $("dropped").textContent = v.dropped_rules ? v.dropped_rules + " descriptors of rules beyond the tracked maximum were not shown" : "";
  $("version").textContent = "Sluice " + v.version + ", up since " + new Date(Date.parse(v.started)).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  $("updated").textContent = "updated " + new Date(Date.parse(v.now)).toLocaleTimeString();
  document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
}

async function poll() {
  try {
    const resp = await fetch("api", { cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    render(await resp.json());
  } catch (e) {
    $("updated").textContent = "cannot reach Sluice: " + e.message;
  }
  setTimeout(poll, 1000);
}
poll();
