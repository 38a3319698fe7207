// Samples of the engine's metrics over time, taken in the page from public routes: the
// Prometheus text at /metrics (counters and histograms of a MetricsInterceptor, HTTP
// requests, runs driven) and, when the engine has no MetricsInterceptor, run counts by
// status from /workflows/aggregate; queue depths from /queues. Kept in memory for the
// tab's life (the last SAMPLES_KEPT), so moving between pages keeps the history.
import { get, getText, session } from "./api.js";

const SAMPLES_KEPT = 120;
const FAST_MS = 3000; // with counters in /metrics: cheap to read
const SLOW_MS = 10000; // counting runs by status instead costs a store read

const samples = [];
const listeners = new Set();
let timer = null;

// The Prometheus text exposition: name -> [{labels, value}].
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const pair of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    const value = Number(m[4]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value });
  }
  return out;
}

const total = (metrics, name, keep = () => true) =>
  (metrics.get(name) || []).filter((s) => keep(s.labels)).reduce((n, s) => n + s.value, 0);

function buckets(metrics, name) {
  const byBound = new Map();
  for (const s of metrics.get(name + "_bucket") || []) {
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    byBound.set(le, (byBound.get(le) || 0) + s.value);
  }
  return [...byBound.entries()].sort((a, b) => a[0] - b[0]);
}

async function sample() {
  const at = Date.now();
  const [text, queues] = await Promise.all([
    getText("/metrics").catch(() => ""),
    session.can("workflows:read", "system:read") ? get("/queues").catch(() => null) : null,
  ]);
  const m = parseMetrics(text);
  const point = { at, queues: {} };
  if (m.has("pyweft_runs_started_total")) {
    point.source = "metrics";
    point.started = total(m, "pyweft_runs_started_total");
    point.ended = total(m, "pyweft_runs_ended_total");
    point.failed = total(m, "pyweft_runs_ended_total", (l) => l.status !== "completed");
  } else if (session.can("workflows:read")) {
    const groups = await get("/workflows/aggregate?group_by=status").catch(() => null);
    if (groups) {
      const count = (keys) => groups.groups.filter((g) => keys.includes(g.key)).reduce((n, g) => n + g.count, 0);
      point.source = "aggregate";
      point.started = groups.groups.reduce((n, g) => n + g.count, 0);
      point.ended = count(["completed", "failed", "cancelled", "timed_out"]);
      point.failed = count(["failed", "cancelled", "timed_out"]);
    }
  }
  if (m.has("pyweft_activity_attempt_duration_seconds_count")) {
    point.activitySum = total(m, "pyweft_activity_attempt_duration_seconds_sum");
    point.activityCount = total(m, "pyweft_activity_attempt_duration_seconds_count");
    point.activityBuckets = buckets(m, "pyweft_activity_attempt_duration_seconds");
  }
  point.requests = total(m, "pyweft_http_requests_total");
  point.driven = m.has("pyweft_engine_runs_driven") ? total(m, "pyweft_engine_runs_driven") : null;
  for (const q of (queues && queues.items) || []) point.queues[q.name] = q.depth;
  for (const s of m.get("pyweft_queue_depth") || []) {
    if (s.labels.kind === "activity") point.queues["activity " + s.labels.queue] = s.value;
  }
  samples.push(point);
  if (samples.length > SAMPLES_KEPT) samples.shift();
  return point;
}

function tick() {
  sample()
    .then((point) => {
      for (const fn of listeners) fn(samples);
      schedule(point.source === "aggregate" ? SLOW_MS : FAST_MS);
    })
    .catch(() => schedule(SLOW_MS));
}

function schedule(ms) {
  if (listeners.size) timer = setTimeout(tick, ms);
  else timer = null;
}

// Calls fn(samples) after each new sample while subscribed; returns the unsubscribe.
export function watchMetrics(fn) {
  listeners.add(fn);
  if (samples.length) fn(samples);
  if (!timer) tick();
  return () => {
    listeners.delete(fn);
    if (!listeners.size && timer) {
      clearTimeout(timer);
      timer = null;
    }
  };
}

// Per-interval series from consecutive samples: rates per minute for counters.
function deltas(list, field) {
  const out = [];
  for (let i = 1; i < list.length; i++) {
    const a = list[i - 1][field];
    const b = list[i][field];
    if (a === undefined || b === undefined) continue;
    const minutes = (list[i].at - list[i - 1].at) / 60000;
    out.push([list[i].at, Math.max(b - a, 0) / minutes]); // a restart resets counters
  }
  return out;
}

function quantile(prev, next, q) {
  const counts = next.map(([le, n], i) => [le, n - ((prev[i] && prev[i][1]) || 0)]);
  const all = counts.length ? counts[counts.length - 1][1] : 0;
  if (all <= 0) return null;
  const found = counts.find(([, n]) => n >= q * all);
  return found && Number.isFinite(found[0]) ? found[0] : counts.length > 1 ? counts[counts.length - 2][0] : null;
}

export function runSeries(list) {
  return [
    { label: "started", points: deltas(list, "started") },
    { label: "ended", points: deltas(list, "ended") },
    { label: "failed or cancelled", points: deltas(list, "failed") },
  ];
}

export function activitySeries(list) {
  const mean = [];
  const p95 = [];
  for (let i = 1; i < list.length; i++) {
    const a = list[i - 1];
    const b = list[i];
    if (a.activityCount === undefined || b.activityCount === undefined) continue;
    const n = b.activityCount - a.activityCount;
    if (n <= 0) continue;
    mean.push([b.at, (b.activitySum - a.activitySum) / n]);
    const q = quantile(a.activityBuckets, b.activityBuckets, 0.95);
    if (q !== null) p95.push([b.at, q]);
  }
  return [
    { label: "mean", points: mean },
    { label: "p95 (bucket bound)", points: p95 },
  ];
}

// Gauges: work waiting per queue, and the runs this engine drives.
export function queueSeries(list) {
  const names = [...new Set(list.flatMap((s) => Object.keys(s.queues)))].sort().slice(0, 5);
  return [
    ...names.map((name) => ({ label: name, points: list.filter((s) => name in s.queues).map((s) => [s.at, s.queues[name]]) })),
    { label: "runs driven here", points: list.filter((s) => s.driven !== null).map((s) => [s.at, s.driven]) },
  ];
}

export function requestSeries(list) {
  return [{ label: "API requests", points: deltas(list, "requests") }];
}
