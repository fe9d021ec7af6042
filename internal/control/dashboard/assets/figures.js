// Figures as the ops pages show them: the same formats as the server's
// first rendering (dashboard/page_overview.go), so a live update never
// changes how a number looks, and a dash for a figure that is missing.

export const dash = "\u2014";

const num = (x) => typeof x === "number" && Number.isFinite(x);

export function fmtRate(x) { return num(x) ? x.toFixed(x > 0 && x < 1 ? 2 : 1) : dash; }
export function fmtPct(x) { return num(x) ? (x * 100).toFixed(1) + "%" : dash; }
export function fmtMs(x) { return num(x) ? (x < 10 ? x.toFixed(1) : x.toFixed(0)) + " ms" : dash; }
export function fmtInt(x) { return num(x) ? String(Math.round(x)) : dash; }

// fill puts v into a catalog text with one "%s" (rendered by the server
// into a data- attribute).
export function fill(text, v) { return String(text || "").replace("%s", String(v)); }

// summarize is the overview's cards from a /stats answer: the last
// minute, rates summed, the error rate over all requests, the slowest
// hostname's latencies.
export function summarize(st) {
  const hosts = st && Array.isArray(st.hosts) ? st.hosts : null;
  if (!hosts) return { rps: dash, errors: dash, p50: dash, p99: dash };
  let rps = 0, reqs = 0, errs = 0, p50 = 0, p99 = 0;
  for (const h of hosts) {
    const w = (h && h.windows && h.windows["1m"]) || {};
    rps += num(w.rps) ? w.rps : 0;
    if (h && h.hostname === UNROUTED) continue; // visitors' misses: no error rate
    reqs += num(w.requests) ? w.requests : 0;
    errs += num(w.errors) ? w.errors : 0;
    p50 = Math.max(p50, num(w.p50_ms) ? w.p50_ms : 0);
    p99 = Math.max(p99, num(w.p99_ms) ? w.p99_ms : 0);
  }
  return { rps: fmtRate(rps), errors: fmtPct(reqs > 0 ? errs / reqs : 0), p50: fmtMs(p50), p99: fmtMs(p99) };
}

// UNROUTED is the API's pseudo-hostname of the requests no bind matched.
const UNROUTED = "__unrouted";

// hostErrorRate is a hostname's error rate in window w as the tables
// show it: a dash for the requests no bind matched, which are visitors'
// misses rather than a service's errors (as page_overview.go).
export function hostErrorRate(hostname, w) {
  return hostname === UNROUTED ? dash : fmtPct(w ? w.error_rate : undefined);
}

// hostLabel is a hostname as the tables show it: the API's
// pseudo-hostnames by their names in the page's language (data-other,
// data-unrouted of labels).
export function hostLabel(name, labels) {
  if (name === "__other") return (labels && labels.dataset.other) || name;
  if (name === UNROUTED) return (labels && labels.dataset.unrouted) || name;
  return String(name == null ? dash : name);
}

// liveBadge returns an onState for stream() that shows the stream's state
// in badge, in the words of its data- attributes.
export function liveBadge(badge) {
  return (state) => {
    if (!badge) return;
    badge.textContent = badge.dataset[state] || state;
    badge.classList.toggle("ok", state === "live");
    badge.classList.toggle("warn", state !== "live");
  };
}

// setText changes an element's text only when it differs, so a screen
// reader and the layout see only real changes.
export function setText(id, v) {
  const e = document.getElementById(id);
  if (e && e.textContent !== v) e.textContent = v;
}

// every calls fn now and every ms milliseconds while the tab is visible
// (a hidden tab polls nothing), and at once when it shows again.
export function every(ms, fn) {
  const tick = () => { if (!document.hidden) fn(); };
  tick();
  setInterval(tick, ms);
  document.addEventListener("visibilitychange", tick);
}

// byName orders clients as the server does: by name, then connection,
// byte by byte (not by locale), so a refresh keeps the rows' order.
export function byName(a, b) {
  const an = String(a.name || ""), bn = String(b.name || "");
  if (an !== bn) return an < bn ? -1 : 1;
  const ai = String(a.id || ""), bi = String(b.id || "");
  return ai < bi ? -1 : ai > bi ? 1 : 0;
}
