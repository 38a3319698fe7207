// Line charts of sampled metrics, drawn as SVG in the page (no library): a line and a
// dot per data point for each series, the time axis over the samples taken, and a
// legend with each series' latest value. Redrawn in place as samples arrive.
import { clear, h } from "./dom.js";
import { activitySeries, queueSeries, requestSeries, runSeries, watchMetrics } from "./metrics.js";

const NS = "http://www.w3.org/2000/svg";
const W = 320;
const H = 120;
const PAD = { left: 34, right: 6, top: 8, bottom: 16 };

function el(tag, attrs, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

function fmt(value, unit) {
  if (value === null || value === undefined) return "—";
  if (unit === "s") return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
  const text = value >= 100 ? Math.round(value).toLocaleString() : String(Math.round(value * 10) / 10);
  return unit ? `${text} ${unit}` : text;
}

function draw(svg, series, unit) {
  const all = series.flatMap((s) => s.points);
  clear(svg);
  if (!all.length) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "waiting for samples…"));
    return;
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(t0 + 1, ...all.map((p) => p[0]));
  const top = Math.max(1e-9, ...all.map((p) => p[1])) * 1.1;
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const grid = el("g", { class: "grid" });
  for (const f of [0, 0.5, 1]) {
    const v = top * f;
    grid.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }));
    grid.append(el("text", { x: PAD.left - 4, y: y(v) + 3, "text-anchor": "end" }, fmt(v, unit === "s" ? "s" : "")));
  }
  const span = Math.round((t1 - t0) / 1000);
  if (span >= 1) grid.append(el("text", { x: PAD.left, y: H - 3 }, span >= 120 ? `−${Math.round(span / 60)} min` : `−${span} s`));
  grid.append(el("text", { x: W - PAD.right, y: H - 3, "text-anchor": "end" }, "now"));
  svg.append(grid);
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const g = el("g", { class: `c${i}`, "data-series": s.label });
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    g.append(el("path", { d, class: `c${i}` }));
    for (const p of s.points) {
      g.append(el("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2.5, class: `c${i}` }, el("title", {}, `${s.label}: ${fmt(p[1], unit)}`)));
    }
    svg.append(g);
  });
}

// One chart; returns {element, update(samples)}.
function chart(id, title, unit, makeSeries, note) {
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "series", role: "img", "aria-label": title });
  const legend = h("ul", { class: "legend" });
  const caption = h("figcaption", { class: "hint" }, note || "");
  const element = h("figure", { id }, h("h3", {}, title), svg, legend, caption);
  const update = (samples) => {
    const series = makeSeries(samples);
    draw(svg, series, unit);
    const latest = series.map((s) => [s.label, s.points.length ? s.points[s.points.length - 1][1] : null]);
    svg.setAttribute("aria-label", `${title}: ` + latest.map(([l, v]) => `${l} ${fmt(v, unit)}`).join(", "));
    clear(
      legend,
      series.map((s, i) =>
        h("li", { dataset: { series: s.label } }, h("span", { class: `swatch c${i}`, "aria-hidden": "true" }), `${s.label} `, h("strong", {}, fmt(latest[i][1], unit))),
      ),
    );
    if (typeof note === "function") caption.textContent = note(samples);
  };
  return { element, update };
}

const runsNote = (samples) => {
  const last = samples[samples.length - 1];
  if (!last || !last.source) return "Needs workflows:read, or a MetricsInterceptor on the engine.";
  return last.source === "metrics"
    ? "Per minute, from the engine's MetricsInterceptor counters (/metrics)."
    : "Per minute, from run counts by status (/workflows/aggregate); add a MetricsInterceptor for exact counts.";
};

const activityNote = (samples) =>
  samples.some((s) => s.activityCount !== undefined)
    ? "Activity attempt wall time per sampling interval (/metrics histogram)."
    : "Shown when the engine has a MetricsInterceptor (pyweft_activity_attempt_duration_seconds).";

// The metrics charts, live until stop() (the page calls it when it is left).
export function metricsCharts(which = ["runs", "activities", "queues", "requests"]) {
  const all = {
    runs: () => chart("chart-runs", "Runs per minute", "", runSeries, runsNote),
    activities: () => chart("chart-activities", "Activity attempt duration", "s", activitySeries, activityNote),
    queues: () => chart("chart-queues", "Queue depth and runs driven", "", queueSeries, "Waiting per queue (/queues, /metrics), and runs this engine drives."),
    requests: () => chart("chart-requests", "API requests per minute", "", requestSeries, "From pyweft_http_requests_total (/metrics)."),
  };
  const charts = which.map((name) => all[name]());
  const stop = watchMetrics((samples) => charts.forEach((c) => c.update(samples)));
  return { element: h("div", { class: "metrics", id: "metrics-charts" }, charts.map((c) => c.element)), stop };
}
