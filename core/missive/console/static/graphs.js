// "Graphs": the last hour from the server's own counters (GET api/series),
// drawn as SVG line charts; no charting library.
import { fill, fmtNum, fmtTime, getJSON, h } from "./api.js";

export const interval = 5000;

const SVG = "http://www.w3.org/2000/svg";
const W = 600, H = 150, LEFT = 44, RIGHT = 8, TOP = 8, BOTTOM = 18;

const CHARTS = [
  { id: "requests", title: "Requests / s", series: [["requests_per_s", "requests"], ["errors_per_s", "errors"]], digits: 2 },
  { id: "tokens", title: "Tokens / s", series: [["input_tokens_per_s", "in (prompt)"], ["output_tokens_per_s", "out"]], digits: 1 },
  { id: "cache", title: "Cache-hit ratio", series: [["cache_hit_ratio", "cached / prompt tokens"]], digits: 2, max: 1 },
  { id: "ttft", title: "Time to first token, s", series: [["ttft_p50_s", "p50"], ["ttft_p95_s", "p95"]], digits: 3 },
  { id: "queue", title: "Queue depth", series: [["waiting_max", "waiting (max)"], ["running_max", "generating (max)"]], digits: 0 },
];

const $ = (id) => document.getElementById(id);
let lastPoints = [];
let bucketSeconds = 10;

export function init() {
  $("gr-model").addEventListener("change", () => refresh());
  $("gr-window").addEventListener("change", () => refresh());
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= value);
}

/** One chart's SVG: a polyline per series, gaps where a point has no value. */
function draw(spec, points) {
  const values = points.flatMap((p) => spec.series.map(([k]) => p[k])).filter((v) => typeof v === "number");
  const top = spec.max || niceMax(Math.max(0, ...values));
  const n = points.length;
  const x = (i) => LEFT + (i / Math.max(1, n - 1)) * (W - LEFT - RIGHT);
  const y = (v) => TOP + (1 - v / top) * (H - TOP - BOTTOM);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": spec.title });
  root.append(svg("line", { class: "axis", x1: LEFT, y1: y(0), x2: W - RIGHT, y2: y(0) }));
  root.append(svg("line", { class: "axis", x1: LEFT, y1: y(top), x2: W - RIGHT, y2: y(top) }));
  for (const [label, at] of [[fmtNum(top, spec.digits), top], ["0", 0]]) {
    const t = svg("text", { x: LEFT - 4, y: y(at) + 3, "text-anchor": "end" });
    t.textContent = label;
    root.append(t);
  }
  const span = ((n - 1) * bucketSeconds) / 60; // minutes from the first point to the last
  const step = [1, 2, 5, 10, 15, 30, 60].find((m) => span / m <= 5) || 60;
  for (let ago = Math.floor(span / step) * step; ago >= 0; ago -= step) {
    const at = x((n - 1) * (1 - ago / span));
    const anchor = at < LEFT + 20 ? "start" : ago === 0 ? "end" : "middle";
    const t = svg("text", { x: at, y: H - 4, "text-anchor": anchor });
    t.textContent = ago ? `-${ago} min` : "now";
    root.append(t);
  }
  spec.series.forEach(([key], s) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) { // a lone point: a short dash, so it shows
        run = [[run[0][0] - 2, run[0][1]], [run[0][0] + 2, run[0][1]]];
      }
      if (run.length) root.append(svg("polyline", { class: `s${s}`, fill: "none", "stroke-width": 2,
        "vector-effect": "non-scaling-stroke", points: run.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ") }));
      run = [];
    };
    points.forEach((p, i) => (typeof p[key] === "number" ? run.push([x(i), y(p[key])]) : flush()));
    flush();
  });
  const cursor = svg("line", { class: "cursor", x1: 0, x2: 0, y1: TOP, y2: H - BOTTOM, visibility: "hidden" });
  root.append(cursor);
  return { root, cursor, x, n };
}

function readout(spec, point) {
  if (!point) return "";
  const parts = spec.series.map(([k, label]) => `${label} ${typeof point[k] === "number" ? fmtNum(point[k], spec.digits) : "-"}`);
  return `${fmtTime(point.t)}: ${parts.join(", ")}`;
}

function chart(spec, points) {
  const { root, cursor, n } = draw(spec, points);
  const out = h("div", { class: "readout muted" }, readout(spec, [...points].reverse().find((p) => spec.series.some(([k]) => typeof p[k] === "number"))));
  root.addEventListener("mousemove", (event) => {
    const box = root.getBoundingClientRect();
    const fraction = ((event.clientX - box.left) / box.width * W - LEFT) / (W - LEFT - RIGHT);
    const i = Math.max(0, Math.min(n - 1, Math.round(fraction * (n - 1))));
    const at = LEFT + (i / Math.max(1, n - 1)) * (W - LEFT - RIGHT);
    cursor.setAttribute("x1", at);
    cursor.setAttribute("x2", at);
    cursor.setAttribute("visibility", "visible");
    out.textContent = readout(spec, lastPoints[i]);
  });
  return h("div", { class: "chart", "data-chart": spec.id },
    h("h3", {}, spec.title),
    h("div", { class: "legend" }, spec.series.map(([, label], s) => h("span", {}, h("i", { class: `l${s}` }), label))),
    root, out);
}

export async function refresh() {
  const select = $("gr-model");
  const model = select.value;
  const data = await getJSON(`api/series${model ? `?model=${encodeURIComponent(model)}` : ""}`);
  const have = [...select.options].slice(1).map((o) => o.value);
  if (data.models.join("\n") !== have.join("\n")) {
    fill(select, h("option", { value: "" }, "all models"), data.models.filter((m) => m).map((m) => h("option", { value: m }, m)));
    select.value = data.models.includes(model) ? model : "";
  }
  bucketSeconds = data.bucket_s;
  $("gr-bucket").textContent = data.bucket_s;
  const shown = Math.max(2, Math.round(Number($("gr-window").value) / data.bucket_s));
  lastPoints = data.points.slice(-shown);
  fill($("charts"), CHARTS.map((spec) => chart(spec, lastPoints)));
  $("charts").dataset.window = $("gr-window").value; // what is drawn (tests wait for it)
}
