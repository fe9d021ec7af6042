// Aperio dashboard, the inspector: while the shown capture records, its
// list of requests follows the API every 2 s, and the captures' time left
// counts down. The page works without it.

import { api, el } from "./app.js";

const table = document.getElementById("requests");
const host = table ? table.dataset.host : "";
const live = document.getElementById("live");
const empty = document.getElementById("requests-empty");
const period = 2000;

// when matches the server's cells: UTC to the second.
function when(iso) {
  const d = new Date(iso);
  if (isNaN(d.getTime())) return "";
  return d.toISOString().slice(0, 19).replace("T", " ") + "Z";
}

function link(id) {
  return "/aperio/ui/inspect?hostname=" + encodeURIComponent(host) + "&id=" + encodeURIComponent(id);
}

function row(s) {
  const path = el("td", null, el("code", { text: s.url }));
  if (s.replay_of) path.append(" ", el("span", { class: "badge", text: table.dataset.replayBadge || "replay" }));
  return el("tr", null,
    el("td", null, el("a", { href: link(s.id), text: when(s.at) })),
    el("td", { text: s.method }),
    path,
    el("td", { class: "num" }, s.status ? String(s.status) : "—", ...(s.error ? [" ", el("span", { class: "muted", text: s.error })] : [])),
    el("td", { class: "num", text: Number(s.duration_ms || 0).toFixed(1) + " ms" }),
    el("td", { text: s.client_id || "" }));
}

async function tick() {
  try {
    const [reqs, caps] = await Promise.all([
      api("GET", "/inspect/" + encodeURIComponent(host) + "/requests"),
      api("GET", "/inspect"),
    ]);
    const body = table.tBodies[0];
    body.replaceChildren(...(reqs || []).slice(0, 1000).map(row));
    if (empty) empty.hidden = body.rows.length > 0;
    const cp = (caps || []).find((c) => c.hostname === host);
    if (!cp || cp.state !== "recording") {
      if (live) live.hidden = true;
      return;
    }
  } catch (e) {
    if (live) live.hidden = true;
    return;
  }
  setTimeout(tick, period);
}

if (table && host && table.dataset.live === "1") {
  if (live) live.hidden = false;
  setTimeout(tick, period);
}

// left matches the server's "9m 05s".
function left(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return s >= 60 ? Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s" : s + "s";
}

const clocks = document.querySelectorAll("time[data-left]");
if (clocks.length) {
  setInterval(() => {
    const now = Date.now();
    for (const c of clocks) {
      const end = Date.parse(c.dateTime);
      if (!isNaN(end)) c.textContent = left(end - now);
    }
  }, 1000);
}
