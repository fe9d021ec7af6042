// Autoscaling page: keeps a record's detail live. Every 5 s, while the
// tab is visible, it reads GET /scaling/{id} and updates the pool's
// figures and the utilization chart, computed as the server draws it
// (page_scaling.go, newUtilChart). A new decision reloads the page, which
// renders the decisions table. Without this script the page is the
// server's snapshot.

import { api } from "./app.js";

const SVG = "http://www.w3.org/2000/svg";
const EVERY = 5000;
const MAX_Y = 4;

const section = document.getElementById("scaling-detail");
const status = document.getElementById("scaling-live");

// showStatus puts the live state in its badge, as the other pages' badges:
// green while live, amber once paused.
function showStatus(text, live) {
  if (!status) return;
  status.textContent = text;
  status.classList.toggle("ok", live);
  status.classList.toggle("warn", !live);
}

const pct = (f) => Math.round(f * 100) + "%";
const num = (v) => String(Math.round(v * 100) / 100);
const clock = (at) => new Date(at).toISOString().slice(11, 19);

function setField(name, text) {
  for (const e of section.querySelectorAll('[data-field="' + name + '"]')) e.textContent = text;
}

// draw redraws the chart from series (oldest first); it answers false when
// the chart's presence must change (a reload draws the other state).
function draw(series, target) {
  const svg = document.getElementById("scaling-chart");
  const measured = series.filter((p) => p.utilization !== null && p.utilization !== undefined);
  if (!svg) return measured.length === 0;
  if (measured.length === 0) return false;
  const bx = Number(svg.dataset.x), by = Number(svg.dataset.y), bw = Number(svg.dataset.w), bh = Number(svg.dataset.h);
  let ymax = Math.max(1, target);
  for (const p of measured) ymax = Math.max(ymax, p.utilization);
  ymax = Math.min(Math.ceil(ymax * 4) / 4, MAX_Y);
  const y = (u) => by + bh * (1 - Math.max(0, Math.min(u, ymax)) / ymax);
  const t0 = Date.parse(series[0].at), span = Date.parse(series[series.length - 1].at) - t0;
  const x = (i) => {
    if (span <= 0) return series.length === 1 ? bx + bw : bx + (bw * i) / (series.length - 1);
    return bx + bw * Math.max(0, Math.min((Date.parse(series[i].at) - t0) / span, 1));
  };
  const lines = [];
  let cur = [], lastX = 0, lastY = 0;
  series.forEach((p, i) => {
    if (p.utilization === null || p.utilization === undefined) {
      if (cur.length) lines.push(cur.join(" "));
      cur = [];
      return;
    }
    lastX = x(i);
    lastY = y(p.utilization);
    cur.push(num(lastX) + "," + num(lastY));
  });
  if (cur.length) lines.push(cur.join(" "));
  const g = document.getElementById("scaling-lines");
  g.replaceChildren(...lines.map((pts) => {
    const pl = document.createElementNS(SVG, "polyline");
    pl.setAttribute("points", pts);
    return pl;
  }));
  const last = document.getElementById("scaling-last");
  last.setAttribute("cx", num(lastX));
  last.setAttribute("cy", num(lastY));
  const ty = num(y(target));
  const tl = document.getElementById("scaling-target");
  tl.setAttribute("y1", ty);
  tl.setAttribute("y2", ty);
  for (const t of svg.querySelectorAll("[data-tick]")) {
    const f = Number(t.dataset.tick);
    t.setAttribute("y", num(y(ymax * f)));
    t.textContent = pct(ymax * f);
  }
  document.getElementById("scaling-start").textContent = clock(series[0].at);
  document.getElementById("scaling-end").textContent = clock(series[series.length - 1].at);
  svg.dataset.ymax = String(ymax);
  return true;
}

async function refresh() {
  if (document.hidden) return;
  let d;
  try {
    d = await api("GET", "/scaling/" + encodeURIComponent(section.dataset.id));
  } catch (e) {
    stop();
    if (status) showStatus(status.dataset.paused + ": " + e.message, false);
    return;
  }
  setField("instances", d.instances);
  setField("capacity", d.capacity);
  setField("inflight", d.inflight);
  setField("utilization", d.utilization === null ? "–" : pct(d.utilization));
  setField("consecutive_failures", d.consecutive_failures);
  const decisions = d.decisions || [];
  const seq = decisions.length ? String(decisions[0].seq) : "0";
  if (seq !== section.dataset.seq || !draw(d.series || [], d.target_utilization)) {
    stop();
    window.location.reload();
    return;
  }
  if (status) showStatus(status.dataset.live, true);
}

let timer = null;
function stop() {
  if (timer !== null) clearInterval(timer);
  timer = null;
}

if (section && section.dataset.id) {
  timer = setInterval(refresh, EVERY);
  if (status) showStatus(status.dataset.live, true);
}
