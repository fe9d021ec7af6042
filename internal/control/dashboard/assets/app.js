// Aperio dashboard: what every page shares. No framework, no build step;
// pages are server-rendered and work without this script, which adds
// confirmations, copy buttons and the live stream.

const body = document.body;

// csrf is the session's token for state-changing API calls.
export const csrf = body ? body.dataset.csrf || "" : "";

// api calls the admin API with the session cookie (and the CSRF token for
// anything but GET), answering the decoded JSON or throwing an Error
// carrying the API's message.
export async function api(method, path, payload) {
  const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD") opts.headers["X-Aperio-CSRF"] = csrf;
  if (payload !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(payload);
  }
  const res = await fetch("/aperio/api" + path, opts);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!res.ok) throw new Error((data && data.error) || res.status + " " + res.statusText);
  return data;
}

// stream follows the server's event stream (GET /aperio/api/stream) and
// calls onEvent(type, data) for each event of the given types; onState
// gets "live" or "reconnecting". params (optional) adds query parameters,
// as {hostname: "app.example.com"}; empty values are left out.
// EventSource reconnects by itself. It answers a function that closes
// the stream.
export function stream(types, onEvent, onState, params) {
  const sp = new URLSearchParams();
  if (types && types.length) sp.set("type", types.join(","));
  for (const [k, v] of Object.entries(params || {})) if (v) sp.set(k, v);
  const q = sp.toString() ? "?" + sp.toString() : "";
  const es = new EventSource("/aperio/api/stream" + q);
  const kinds = (types && types.length ? types : ["access", "scaling", "client"]).concat(["dropped"]);
  for (const k of kinds) {
    es.addEventListener(k, (ev) => {
      let data = null;
      try { data = JSON.parse(ev.data); } catch (e) { return; }
      onEvent(k, data);
    });
  }
  if (onState) {
    es.onopen = () => onState("live");
    es.onerror = () => onState("reconnecting");
  }
  return () => es.close();
}

// el builds an element: el("td", {class: "num"}, "42").
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// Forms with data-confirm ask before they are sent.
document.addEventListener("submit", (ev) => {
  const f = ev.target;
  if (f instanceof HTMLFormElement && f.dataset.confirm && !window.confirm(f.dataset.confirm)) {
    ev.preventDefault();
  }
});

// Buttons with data-copy copy the text of the element they name.
document.addEventListener("click", async (ev) => {
  const b = ev.target instanceof Element ? ev.target.closest("[data-copy]") : null;
  if (!b) return;
  const src = document.getElementById(b.dataset.copy);
  if (!src) return;
  try {
    await navigator.clipboard.writeText(src.textContent);
    b.dataset.copied = "1";
  } catch (e) {
    const r = document.createRange();
    r.selectNodeContents(src);
    const s = window.getSelection();
    s.removeAllRanges();
    s.addRange(r);
  }
});

// The header's Admin menu (a <details>) closes on Escape, focus back on
// its summary, and on a click outside it; without this script it closes
// on a second click of its summary.
const adminMenu = document.getElementById("nav-admin");
if (adminMenu) {
  adminMenu.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && adminMenu.open) {
      adminMenu.open = false;
      adminMenu.querySelector("summary").focus();
    }
  });
  document.addEventListener("click", (ev) => {
    if (adminMenu.open && ev.target instanceof Node && !adminMenu.contains(ev.target)) adminMenu.open = false;
  });
}
