// The traffic page, live: the access log's tail from the stream's
// "access" events (newest on top, at most 500 rows, filtered here and, for
// a hostname, by the server too), pause and resume, and the charts from
// GET /stats every 5 s.
import { api, stream, el } from "./app.js";
import { lineChart, stackedBars, swatch } from "./chart.js";
import { dash, fill, fmtInt, fmtMs, fmtRate, hostErrorRate, hostLabel, every } from "./figures.js";

const MAX_ROWS = 500;
const $ = (id) => document.getElementById(id);
const form = $("traffic-filter"), tbody = $("tail"), tailTable = $("tail-table");
const pauseBtn = $("tail-pause"), badge = $("live-state"), charts = $("charts");
const hostRe = /^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$/;

let filter = readFilter();
let paused = false, buffered = [], dropped = 0, sampled = 0, state = "reconnecting", closeStream = null;

function readFilter() {
  const host = ($("f-hostname").value || "").trim().toLowerCase().replace(/\.$/, "");
  return { hostname: hostRe.test(host) ? host : "", status: $("f-status").value, path: $("f-path").value };
}

function classOf(status) {
  return typeof status !== "number" || status < 100 || status > 599 ? "aborted" : Math.floor(status / 100) + "xx";
}

function shows(tr) {
  const d = tr.dataset;
  return (!filter.hostname || d.hostname === filter.hostname) &&
    (!filter.status || d.cls === filter.status) &&
    (!filter.path || (d.path || "").includes(filter.path));
}

function clockMs(s) {
  const t = new Date(s);
  if (Number.isNaN(t.getTime())) return dash;
  return t.toLocaleTimeString([], { hour12: false }) + "." + String(t.getMilliseconds()).padStart(3, "0");
}

function row(ev) {
  const cls = classOf(ev.status);
  const status = cls === "aborted" ? tailTable.dataset.aborted : String(ev.status);
  const statusCls = { "2xx": "ok", "3xx": "", "4xx": "warn", "5xx": "bad", aborted: "bad" }[cls];
  const tr = el("tr", {},
    el("td", {}, el("time", { datetime: ev.at || "" }, clockMs(ev.at))),
    el("td", {}, ev.hostname || dash),
    el("td", {}, ev.method || dash),
    el("td", { class: "path" }, ev.path || dash),
    el("td", { class: "num" }, el("span", { class: statusCls || null }, status)),
    el("td", { class: "num" }, fmtMs(ev.duration_ms)),
    el("td", { class: "num" }, fmtMs(ev.queue_wait_ms)),
    el("td", { class: "num" }, fmtMs(ev.hold_ms)),
    el("td", {}, ev.limit || dash),
    el("td", {}, el("code", {}, ev.client || dash)));
  tr.dataset.hostname = String(ev.hostname || "");
  tr.dataset.cls = cls;
  tr.dataset.path = String(ev.path || "");
  if (ev.request_id) tr.title = String(ev.request_id);
  tr.hidden = !shows(tr);
  return tr;
}

// insert puts events on top of the tail; the first ones replace the
// server's "waiting for requests" row.
function insert(events) {
  const waiting = $("tail-waiting");
  if (waiting && events.length) waiting.remove();
  const frag = document.createDocumentFragment();
  for (let i = events.length - 1; i >= 0; i--) frag.append(row(events[i]));
  tbody.prepend(frag);
  while (tbody.rows.length > MAX_ROWS) tbody.lastElementChild.remove();
}

function showState() {
  const d = badge.dataset;
  let text = paused ? d.paused : (d[state] || state);
  if (paused && buffered.length) text += " \u00b7 " + fill(d.buffered, buffered.length);
  if (dropped) text += " \u00b7 " + fill(d.dropped, dropped);
  if (sampled) text += " \u00b7 " + fill(d.sampled, sampled);
  badge.textContent = text;
  badge.classList.toggle("ok", !paused && state === "live");
  badge.classList.toggle("warn", paused || state !== "live");
}

function onEvent(type, data) {
  if (type === "dropped") {
    const count = data && typeof data.count === "number" ? data.count : 0;
    const skipped = data && typeof data.sampled === "number" ? Math.min(data.sampled, count) : 0;
    dropped += count - skipped;
    sampled += skipped;
    showState();
    return;
  }
  if (type !== "access" || !data || typeof data !== "object") return;
  if (paused) {
    buffered.push(data);
    if (buffered.length > MAX_ROWS) buffered.shift();
    showState();
    return;
  }
  insert([data]);
}

function connect() {
  if (closeStream) closeStream();
  closeStream = stream(["access"], onEvent, (s) => { state = s; showState(); }, { hostname: filter.hostname });
}

pauseBtn.addEventListener("click", () => {
  paused = !paused;
  pauseBtn.setAttribute("aria-pressed", String(paused));
  pauseBtn.textContent = paused ? pauseBtn.dataset.resume : pauseBtn.dataset.pause;
  if (!paused && buffered.length) {
    insert(buffered);
    buffered = [];
  }
  showState();
});

function applyFilter() {
  const before = filter.hostname;
  filter = readFilter();
  for (const tr of tbody.rows) if (tr.id !== "tail-waiting") tr.hidden = !shows(tr);
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) if (v) q.set(k, v);
  history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
  if (filter.hostname !== before) {
    connect();
    drawCharts();
  }
}

form.addEventListener("submit", (ev) => { ev.preventDefault(); applyFilter(); });
form.addEventListener("change", applyFilter);
let typing = 0;
form.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(applyFilter, 300); });

// The charts.
const HOST_COLORS = ["#2454c5", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490"];
const CLASS_COLORS = { "2xx": "#1c7c3c", "3xx": "#2454c5", "4xx": "#c28a00", "5xx": "#b3261e", aborted: "#6b7280" };
const CLASSES = ["2xx", "3xx", "4xx", "5xx", "aborted"];
const BUCKET_S = 10;

function legend(id, items) {
  $(id).replaceChildren(...items.map(([color, text]) => el("li", {}, swatch(color), " ", text)));
}

async function drawCharts() {
  let st;
  try {
    st = await api("GET", "/stats" + (filter.hostname ? "?hostname=" + encodeURIComponent(filter.hostname) : ""));
  } catch (e) {
    return;
  }
  const hosts = st && Array.isArray(st.hosts) ? st.hosts.filter((h) => Array.isArray(h.series)) : [];
  const xsSet = new Set();
  for (const h of hosts) for (const b of h.series) if (typeof b.at === "number") xsSet.add(b.at);
  const xs = [...xsSet].sort((a, b) => a - b).slice(-60);
  const at = new Map(xs.map((x, i) => [x, i]));
  const d = charts.dataset;

  // Requests per second: the busiest hostnames, one line each.
  const per = hosts.map((h) => {
    const values = new Array(xs.length).fill(0);
    let total = 0;
    for (const b of h.series) {
      const i = at.get(b.at);
      const n = typeof b.requests === "number" ? b.requests : 0;
      if (i !== undefined) { values[i] = n / BUCKET_S; total += n; }
    }
    return { name: hostLabel(h.hostname, charts), values, total };
  }).filter((h) => h.total > 0).sort((a, b) => b.total - a.total).slice(0, HOST_COLORS.length);
  per.forEach((h, i) => { h.color = HOST_COLORS[i]; });
  const rpsSummary = per.length
    ? d.rpsLabel + ": " + per.map((h) => `${h.name} ${d.now} ${fmtRate(h.values[h.values.length - 1])}/s, ${d.peak} ${fmtRate(Math.max(...h.values))}/s`).join("; ")
    : d.empty;
  lineChart($("chart-rps"), xs, per, rpsSummary);
  legend("legend-rps", per.map((h) => [h.color, h.name]));

  // Status classes per bucket, summed over the hostnames.
  const layers = CLASSES.map((c) => ({ name: c === "aborted" ? d.aborted : c, color: CLASS_COLORS[c], values: new Array(xs.length).fill(0), total: 0 }));
  for (const h of hosts) {
    for (const b of h.series) {
      const i = at.get(b.at);
      if (i === undefined) continue;
      CLASSES.forEach((c, k) => {
        const n = typeof b[c] === "number" ? b[c] : 0;
        layers[k].values[i] += n;
        layers[k].total += n;
      });
    }
  }
  const any = layers.some((l) => l.total > 0);
  const statusSummary = any
    ? d.statusLabel + ", " + d.total + ": " + layers.filter((l) => l.total > 0).map((l) => `${l.name} ${l.total}`).join(", ")
    : d.empty;
  stackedBars($("chart-status"), xs, layers, statusSummary);
  legend("legend-status", layers.map((l) => [l.color, l.name]));
  showHosts(st && Array.isArray(st.hosts) ? st.hosts : []);
}

// showHosts draws the hostnames' table again, in the server's cells.
function showHosts(hosts) {
  const table = $("hosts-table");
  if (!table) return;
  const rows = hosts.map((h) => {
    const w = h.windows || {}, m = w["1m"] || {}, f = w["5m"] || {}, hr = w["1h"] || {};
    const n = (v) => el("td", { class: "num" }, v);
    return el("tr", {}, el("td", {}, hostLabel(h.hostname, charts)),
      n(fmtRate(m.rps)), n(hostErrorRate(h.hostname, m)), n(fmtMs(m.p50_ms)), n(fmtMs(m.p99_ms)),
      n(fmtMs(m.queue_wait_p99_ms)), n(fmtInt(f.requests)), ...CLASSES.map((c) => n(fmtInt(hr[c]))));
  });
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 12 }, table.dataset.none || "")));
  table.tBodies[0].replaceChildren(...rows);
}

connect();
showState();
every(5000, drawCharts);
let resizing = 0;
window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(drawCharts, 200); });
