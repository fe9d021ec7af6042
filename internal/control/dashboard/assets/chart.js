// Small SVG charts for the traffic page, drawn from scratch: a line chart
// (one line per series) and a stacked bar chart (one bar per bucket, one
// layer per series). Each draws into an <svg role="img"> sized by CSS and
// sets its aria-label to the summary the caller gives.

const NS = "http://www.w3.org/2000/svg";
const H = 180, PAD_L = 44, PAD_R = 8, PAD_T = 10, PAD_B = 20;

function s(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function label(v) {
  if (v >= 1000) return (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k";
  if (v >= 10 || Number.isInteger(v)) return v.toFixed(0);
  return String(Number(v.toFixed(v < 1 ? 2 : 1)));
}

function clock(unix) {
  const t = new Date(unix * 1000);
  return String(t.getHours()).padStart(2, "0") + ":" + String(t.getMinutes()).padStart(2, "0");
}

// frame prepares svg for a chart of xs (Unix seconds) up to top: clears
// it, sizes the viewBox to its box, and draws the axes and labels. It
// answers the x and y of a bucket index and a value.
function frame(svg, xs, top) {
  const w = Math.max(200, Math.round(svg.getBoundingClientRect().width) || 600);
  svg.setAttribute("viewBox", `0 0 ${w} ${H}`);
  svg.replaceChildren();
  const iw = w - PAD_L - PAD_R, ih = H - PAD_T - PAD_B;
  const n = Math.max(1, xs.length);
  const x = (i) => PAD_L + (n === 1 ? iw / 2 : (i * iw) / (n - 1));
  const y = (v) => PAD_T + ih - (Math.min(v, top) / top) * ih;
  for (const v of [0, top / 2, top]) {
    svg.append(s("line", { class: "axis", x1: PAD_L, x2: w - PAD_R, y1: y(v), y2: y(v) }));
    svg.append(s("text", { x: PAD_L - 4, y: y(v) + 3, "text-anchor": "end" }, label(v)));
  }
  if (xs.length) {
    svg.append(s("text", { x: PAD_L, y: H - 5, "text-anchor": "start" }, clock(xs[0])));
    svg.append(s("text", { x: w - PAD_R, y: H - 5, "text-anchor": "end" }, clock(xs[xs.length - 1])));
  }
  return { x, y, iw, n };
}

// lineChart draws series ([{name, color, values}], values aligned with
// xs) as lines.
export function lineChart(svg, xs, series, summary) {
  let top = 0;
  for (const se of series) for (const v of se.values) top = Math.max(top, v);
  const f = frame(svg, xs, niceMax(top));
  for (const se of series) {
    const pts = se.values.map((v, i) => `${f.x(i).toFixed(1)},${f.y(v).toFixed(1)}`).join(" ");
    const line = s("polyline", { points: pts, fill: "none", stroke: se.color, "stroke-width": 2, "stroke-linejoin": "round" });
    line.append(s("title", {}, se.name));
    svg.append(line);
  }
  svg.setAttribute("aria-label", summary);
}

// stackedBars draws layers ([{name, color, values}], bottom first) as
// one stacked bar per bucket of xs.
export function stackedBars(svg, xs, layers, summary) {
  let top = 0;
  for (let i = 0; i < xs.length; i++) {
    let sum = 0;
    for (const l of layers) sum += l.values[i] || 0;
    top = Math.max(top, sum);
  }
  const max = niceMax(top);
  const f = frame(svg, xs, max);
  const slot = f.iw / Math.max(1, f.n), bw = Math.max(1, slot - 1);
  for (let i = 0; i < xs.length; i++) {
    let base = 0;
    for (const l of layers) {
      const v = l.values[i] || 0;
      if (v <= 0) continue;
      const y0 = f.y(base), y1 = f.y(base + v);
      const r = s("rect", { x: (PAD_L + i * slot).toFixed(1), y: y1.toFixed(1), width: bw.toFixed(1), height: Math.max(0.5, y0 - y1).toFixed(1), fill: l.color });
      r.append(s("title", {}, `${clock(xs[i])} ${l.name}: ${v}`));
      svg.append(r);
      base += v;
    }
  }
  svg.setAttribute("aria-label", summary);
}

// swatch is a legend's colour square, an SVG (a style attribute would
// break the page's Content-Security-Policy).
export function swatch(color) {
  const e = s("svg", { width: 10, height: 10, viewBox: "0 0 10 10", "aria-hidden": "true", class: "swatch" });
  e.append(s("rect", { width: 10, height: 10, fill: color }));
  return e;
}
