// The overview, live: the cards and the hostnames' table from GET /stats
// every 2 s, the clients' count and table again from GET /clients when a
// client connects or leaves (the stream's "client" events).
import { api, stream, el } from "./app.js";
import { byName, summarize, fmtRate, fmtMs, fmtInt, hostErrorRate, hostLabel, liveBadge, setText, every } from "./figures.js";

const hostsTable = document.getElementById("hosts-table");
const clientsTable = document.getElementById("clients-table");

function showStats(st) {
  if (!st || typeof st !== "object") return;
  const s = summarize(st);
  setText("stat-rps", s.rps);
  setText("stat-errors", s.errors);
  setText("stat-p50", s.p50);
  setText("stat-p99", s.p99);
  setText("stat-held", fmtInt(st.held));
  setText("stat-scaling", fmtInt(st.scaling_events_1h));
  if (typeof st.clients === "number") setText("clients-count", fmtInt(st.clients));
  if (typeof st.hostnames === "number") setText("hostnames-count", fmtInt(st.hostnames));
  if (!hostsTable || !Array.isArray(st.hosts)) return;
  const rows = st.hosts.map((h) => {
    const w = (h.windows && h.windows["1m"]) || {};
    return el("tr", {},
      el("td", {}, hostLabel(h.hostname, hostsTable)),
      el("td", { class: "num" }, fmtRate(w.rps)),
      el("td", { class: "num" }, hostErrorRate(h.hostname, w)),
      el("td", { class: "num" }, fmtMs(w.p50_ms)),
      el("td", { class: "num" }, fmtMs(w.p99_ms)));
  });
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 5 }, hostsTable.dataset.none || "")));
  hostsTable.tBodies[0].replaceChildren(...rows);
}

async function pollStats() {
  try {
    showStats(await api("GET", "/stats"));
  } catch (e) {
    // Keep the last figures; the next poll tries again.
  }
}

async function refreshClients() {
  let list;
  try {
    list = await api("GET", "/clients");
  } catch (e) {
    return;
  }
  if (!Array.isArray(list)) return;
  const ids = new Set(), hosts = new Set();
  for (const c of list) {
    ids.add(c.id);
    for (const h of c.hostnames || []) hosts.add(h);
  }
  setText("clients-count", String(ids.size));
  setText("hostnames-count", String(hosts.size));
  if (!clientsTable) return;
  const d = clientsTable.dataset;
  list.sort((a, b) => byName(a, b));
  const rows = list.map((c) => el("tr", {},
    el("td", {}, c.name || ""),
    el("td", {}, (c.hostnames || []).join(", ") + (c.path || "")),
    el("td", {}, c.healthy ? d.yes : d.no)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 3 }, d.none || "")));
  clientsTable.tBodies[0].replaceChildren(...rows);
}

every(2000, pollStats);
stream(["client"], refreshClients, liveBadge(document.getElementById("live-state")));
