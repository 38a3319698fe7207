// Queues and workers: workflow queues (depth, in flight, oldest waiting, recent starts,
// limits), activity queues (tasks waiting and in flight, workers, limits), and the
// workers themselves with their heartbeats, drain and resume. Refreshed every few
// seconds while open.
import { enc, get, post, session } from "./api.js";
import { action, badge, clear, fmtDuration, fmtRelative, fmtTime, h, notify, section, table } from "./dom.js";

const REFRESH_MS = 2000;
const READ = ["system:read", "workflows:read"];

const dash = (v) => (v === null || v === undefined ? "—" : v);
const seconds = (s) => (s === null || s === undefined ? "—" : fmtDuration(s * 1000));
const rate = (r) => (r ? `${r[0]} per ${fmtDuration(r[1] * 1000)}` : "—");

function limits(q) {
  const parts = [];
  if (q.concurrency !== null) parts.push(`${q.concurrency} at once`);
  if (q.worker_concurrency !== null) parts.push(`${q.worker_concurrency} per engine`);
  if (q.rate_limit) parts.push(rate(q.rate_limit));
  if (q.priority) parts.push("priority");
  if (q.partitioned) parts.push(`partitioned (${q.partitions})`);
  return parts.join(", ") || "none";
}

function queueRows(items) {
  return items.map((q) =>
    h(
      "tr",
      { dataset: { queue: q.name } },
      h("th", { scope: "row" }, q.name),
      h("td", { class: "num" }, q.depth, q.delayed ? h("small", { class: "muted" }, ` (${q.delayed} delayed)`) : null),
      h("td", { class: "num" }, q.in_flight),
      h("td", {}, seconds(q.oldest_wait_s)),
      h("td", {}, q.rate_limit ? `${dash(q.recent_starts)} / ${q.rate_limit[0]} in window` : "—"),
      h("td", {}, limits(q)),
    ),
  );
}

function activityRows(items) {
  return items.map((q) =>
    h(
      "tr",
      { dataset: { activityQueue: q.queue } },
      h("th", { scope: "row" }, q.queue),
      h("td", { class: "num" }, q.waiting),
      h("td", {}, seconds(q.oldest_waiting_s)),
      h("td", { class: "num" }, q.workers, q.draining ? h("small", { class: "muted" }, ` (${q.draining} draining)`) : null),
      h("td", { class: "num" }, `${q.in_flight} / ${q.slots}`),
      h("td", {}, q.concurrency_limit === null ? "—" : `${q.concurrency_limit} at once`),
      h("td", {}, rate(q.rate_limit)),
    ),
  );
}

export async function queuesPage({ main, onLeave }) {
  if (!session.can(...READ)) {
    clear(main, h("h1", {}, "Queues"), h("p", { class: "muted" }, "Not shown: needs scope system:read or workflows:read"));
    return;
  }
  const flow = h("div", { id: "queues" });
  const acts = h("div", { id: "activity-queues" });
  const stamp = h("p", { class: "muted", "aria-live": "off" });
  async function load() {
    const [queues, activity] = await Promise.all([get("/queues"), get("/activity-queues")]);
    clear(
      flow,
      queues.items.length
        ? table(["Queue", "Waiting", "In flight", "Oldest waiting", "Recent starts", "Limits"], queueRows(queues.items), { caption: "Workflow queues (engine.enqueue)" })
        : h("p", { class: "muted" }, "No workflow queue is defined on this store (Engine(queues=[Queue(...)]))."),
    );
    clear(
      acts,
      activity.items.length
        ? table(["Queue", "Waiting", "Oldest waiting", "Workers", "In flight / slots", "Concurrency limit", "Rate limit"], activityRows(activity.items), { caption: "Activity queues with tasks or live workers" })
        : h("p", { class: "muted" }, "No activity queue has tasks or a live worker."),
    );
    clear(stamp, "Updated " + new Date().toLocaleTimeString());
  }
  await load();
  clear(main, h("h1", {}, "Queues"), section("Workflow queues", flow), section("Activity queues", acts), stamp);
  const timer = setInterval(() => load().catch(() => {}), REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

function workerRow(w, reload) {
  const write = ["workers:write"];
  const control = w.drain_requested
    ? action("Resume", write, async () => {
        await post(`/workers/${enc(w.id)}/resume`);
        notify(`${w.id} may claim tasks again`);
        reload();
      }, { id: `resume-${w.id}` })
    : action("Drain", write, async () => {
        await post(`/workers/${enc(w.id)}/drain`);
        notify(`${w.id} is draining: it stops claiming, what it runs finishes`);
        reload();
      }, { id: `drain-${w.id}`, confirm: `Drain worker ${w.id}? It stops claiming tasks until resumed; what it runs finishes.` });
  return h(
    "tr",
    { dataset: { worker: w.id } },
    h("th", { scope: "row", class: "mono" }, w.id),
    h("td", {}, badge(w.status), w.drain_requested && w.status === "active" ? h("small", { class: "muted" }, " drain requested") : null),
    h("td", {}, w.queues.map((q) => h("span", { class: "tag" }, q))),
    h("td", { class: "num" }, `${w.in_flight} / ${w.concurrency}`),
    h("td", { title: fmtTime(w.last_heartbeat) }, fmtRelative(w.last_heartbeat)),
    h("td", {}, fmtRelative(w.started_at)),
    h("td", { class: "num" }, `${w.completed} ok, ${w.failed} failed`),
    h("td", { class: "mono" }, `${w.host}:${w.pid}`),
    h("td", {}, w.status === "gone" ? "—" : control),
  );
}

export async function workersPage({ main, params, onLeave }) {
  if (!session.can(...READ)) {
    clear(main, h("h1", {}, "Workers"), h("p", { class: "muted" }, "Not shown: needs scope system:read or workflows:read"));
    return;
  }
  const gone = params.get("gone") === "true";
  const body = h("div", { id: "workers" });
  const stamp = h("p", { class: "muted", "aria-live": "off" });
  async function load() {
    const found = await get("/workers" + (gone ? "?include_gone=true" : ""));
    clear(
      body,
      found.items.length
        ? table(["Worker", "Status", "Queues", "In flight / slots", "Last heartbeat", "Started", "Attempts", "Host:pid", ""], found.items.map((w) => workerRow(w, load)), { caption: "Worker processes (pyweft worker)" })
        : h("p", { class: "muted" }, "No live worker. Start one with pyweft worker MODULE --queue NAME."),
    );
    clear(stamp, "Updated " + new Date().toLocaleTimeString());
  }
  await load();
  const toggle = h("a", { href: "#/workers" + (gone ? "" : "?gone=true") }, gone ? "Hide gone workers" : "Show gone workers");
  clear(main, h("h1", {}, "Workers"), section("Workers", body, h("p", {}, toggle)), stamp);
  // A refresh while a confirmation is open would replace the button under the dialog.
  const timer = setInterval(() => {
    if (!document.querySelector("dialog[open]")) load().catch(() => {});
  }, REFRESH_MS);
  onLeave(() => clearInterval(timer));
}
