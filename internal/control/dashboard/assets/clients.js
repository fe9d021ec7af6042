// The clients page, live: the table is drawn again from GET /clients when
// a client connects or leaves (the stream's "client" events) and every
// 5 s, in the same cells as the server's rendering (templates/clients.html).
import { api, stream, el, csrf } from "./app.js";
import { byName, fill, liveBadge, every } from "./figures.js";

const table = document.getElementById("clients-table");
const d = table ? table.dataset : {};
const canOperate = d.canOperate === "1";
let accessLabels = {};
try { accessLabels = JSON.parse(d.accessLabels || "{}") || {}; } catch (e) { accessLabels = {}; }

// access is the Access cell: the service's announced access control in
// the page's words, or the server's default when it announced none.
function access(c) {
  const words = Array.isArray(c.access) ? c.access : [];
  if (!words.length) return el("span", { class: "muted" }, d.accessDefault || "");
  return document.createTextNode(words.map((w) => (Object.hasOwn(accessLabels, w) ? accessLabels[w] : String(w))).join(", "));
}

const yesNo = (b, cls) => b ? el("span", { class: cls }, d.yes) : document.createTextNode(d.no);

function when(s) {
  const t = new Date(s);
  if (!s || Number.isNaN(t.getTime()) || t.getTime() <= 0) return "";
  return t.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function limit(c) {
  const cc = c.concurrency;
  if (cc && typeof cc === "object") {
    const how = cc.fixed ? d.fixed : `${cc.mode} ${cc.min}\u2013${cc.max}`;
    return [String(cc.desired), " ", el("span", { class: "muted" }, `(${how})`)];
  }
  return [c.max_concurrent ? String(c.max_concurrent) : d.unlimited];
}

function action(c) {
  const verb = c.disabled ? "enable" : "disable";
  const f = el("form", { method: "post", action: "/aperio/ui/clients/" + verb, class: "inline" },
    el("input", { type: "hidden", name: "csrf", value: csrf }),
    el("input", { type: "hidden", name: "id", value: c.id }),
    el("button", {
      type: "submit", class: c.disabled ? "secondary" : "danger", "data-action": verb,
      "aria-label": fill(c.disabled ? d.enableNamed : d.disableNamed, c.name),
    }, c.disabled ? d.enable : d.disable));
  if (!c.disabled) f.dataset.confirm = fill(d.confirmDisable, c.name);
  return f;
}

// drainAction is the Drain form, offered until the client says it drains.
function drainAction(c) {
  const f = el("form", { method: "post", action: "/aperio/ui/clients/drain", class: "inline" },
    el("input", { type: "hidden", name: "csrf", value: csrf }),
    el("input", { type: "hidden", name: "id", value: c.id }),
    el("button", {
      type: "submit", class: "secondary", "data-action": "drain",
      "aria-label": fill(d.drainNamed, c.name),
    }, d.drain));
  f.dataset.confirm = fill(d.confirmDrain, c.name);
  return f;
}

function row(c, first, now) {
  const binds = [(c.hostnames || []).join(", ")];
  if (c.path) binds.push(" ", el("code", {}, c.path));
  const until = c.ejected_until ? new Date(c.ejected_until) : null;
  const ejected = until && until.getTime() > now
    ? el("span", { class: "warn" }, d.until + " ", el("time", { datetime: until.toISOString() }, when(c.ejected_until)))
    : document.createTextNode(d.no);
  const refused = c.refused_binds && c.refused_binds.length
    ? el("span", { class: "bad" }, c.refused_binds.join(", ")) : document.createTextNode(d.refusedNone);
  const tr = el("tr", { "data-id": c.id },
    el("td", {}, c.name || ""),
    el("td", { "data-cell": "version" }, c.version ? el("code", {}, c.version) : el("span", { class: "muted" }, d.versionUnknown)),
    el("td", {}, ...binds),
    el("td", { "data-cell": "access" }, access(c)),
    el("td", { class: "num" }, ...limit(c)),
    el("td", { class: "num" }, String(c.inflight ?? "")),
    el("td", {}, c.healthy ? el("span", { class: "ok" }, d.yes) : el("span", { class: "bad" }, d.no)),
    el("td", {}, yesNo(c.draining, "warn")),
    el("td", {}, yesNo(c.disabled, "bad")),
    el("td", {}, ejected),
    el("td", { class: "num" }, String(c.weight ?? "")),
    el("td", {}, el("code", {}, c.remote_addr || "")),
    el("td", {}, el("time", { datetime: c.connected_at || "" }, when(c.connected_at))),
    el("td", {}, refused));
  const actions = first ? [action(c)] : [];
  if (first && !c.draining) actions.push(" ", drainAction(c));
  if (canOperate) tr.append(el("td", {}, ...actions));
  return tr;
}

async function refresh() {
  let list;
  try {
    list = await api("GET", "/clients");
  } catch (e) {
    return;
  }
  if (!table || !Array.isArray(list)) return;
  list.sort(byName);
  const now = Date.now();
  const rows = list.map((c, i) => row(c, i === 0 || list[i - 1].id !== c.id, now));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 14 }, d.none)));
  // Keep the keyboard's place: a focused button is focused again in the
  // new table, found by its client and action.
  const focused = document.activeElement;
  let again = null;
  if (focused && table.contains(focused) && focused.dataset.action) {
    const tr = focused.closest("tr");
    again = tr ? [tr.dataset.id, focused.dataset.action] : null;
  }
  table.tBodies[0].replaceChildren(...rows);
  if (again) {
    for (const tr of table.tBodies[0].rows) {
      const b = tr.dataset.id === again[0] && tr.querySelector("button[data-action]");
      if (b) { b.focus(); break; }
    }
  }
}

every(5000, refresh);
stream(["client"], refresh, liveBadge(document.getElementById("live-state")));
