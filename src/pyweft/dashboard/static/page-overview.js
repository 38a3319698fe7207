// Overview: counts by status and type, failures over the last day, a live activity
// feed, lease health, blocked runs and late schedules.
import { follow, get, qs, session } from "./api.js";
import { metricsCharts } from "./charts.js";
import { badge, clear, fmtRelative, fmtTime, h, runLink, section, table } from "./dom.js";

const STATUSES = ["pending", "enqueued", "running", "suspended", "blocked", "completed", "failed", "cancelled", "timed_out"];

function counts(groups, linkParam) {
  if (!groups.length) return h("p", { class: "muted" }, "No runs yet.");
  return h(
    "ul",
    { class: "counts" },
    groups.map((g) =>
      h(
        "li",
        {},
        h(
          "a",
          { href: "#/runs" + qs({ [linkParam]: g.key }) },
          linkParam === "status" ? badge(g.key) : h("span", { class: "mono" }, g.key),
          h("strong", {}, g.count.toLocaleString()),
        ),
      ),
    ),
  );
}

// Failures per hour over the last 24 hours, as bars (one SVG, no library).
function failureChart(items) {
  const now = Date.now();
  const buckets = new Array(24).fill(0);
  for (const run of items) {
    const age = (now - new Date(run.updated_at).getTime()) / 3600e3;
    if (age >= 0 && age < 24) buckets[23 - Math.floor(age)] += 1;
  }
  const max = Math.max(1, ...buckets);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 240 60");
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  const total = buckets.reduce((a, b) => a + b, 0);
  svg.setAttribute("aria-label", `${total} failed runs in the last 24 hours, by hour`);
  buckets.forEach((n, i) => {
    const r = document.createElementNS(ns, "rect");
    const height = (n / max) * 56;
    r.setAttribute("x", String(i * 10 + 1));
    r.setAttribute("y", String(58 - height));
    r.setAttribute("width", "8");
    r.setAttribute("height", String(Math.max(height, n ? 1 : 0.5)));
    r.setAttribute("class", n ? "bar fail" : "bar");
    const title = document.createElementNS(ns, "title");
    title.textContent = `${n} failed, ${23 - i}h ago`;
    r.append(title);
    svg.append(r);
  });
  return h("figure", {}, svg, h("figcaption", { class: "muted" }, `${total} failures in the last 24 h (per hour, oldest left)`));
}

function eventLine(e) {
  return h(
    "li",
    {},
    h("time", { datetime: e.at }, new Date(e.at).toLocaleTimeString()),
    " ",
    h("span", { class: `kind k-${e.kind}` }, e.kind),
    " ",
    e.workflow_id ? runLink(e.workflow_id) : h("span", { class: "mono" }, (e.data && e.data.schedule_id) || ""),
    e.workflow_type ? h("span", { class: "muted" }, " · " + e.workflow_type) : null,
  );
}

function queueSummary(queues, workers) {
  const live = workers.items.filter((w) => w.status !== "gone");
  const busy = live.reduce((n, w) => n + w.in_flight, 0);
  const slots = live.reduce((n, w) => n + w.concurrency, 0);
  return h(
    "div",
    { id: "overview-queues" },
    queues.items.length
      ? h("ul", { class: "counts" }, queues.items.map((q) => h("li", {}, h("a", { href: "#/queues" }, h("span", {}, q.name), h("span", {}, `${q.depth} waiting · ${q.in_flight} in flight`)))))
      : h("p", { class: "muted" }, "No workflow queue defined."),
    h("p", {}, h("a", { href: "#/workers" }, `${live.length} worker(s)`), `, ${busy} of ${slots} slots busy`, live.some((w) => w.status !== "active") ? ", some draining" : ""),
  );
}

async function optional(scope, load) {
  if (!session.can(scope)) return { denied: `needs scope ${scope}` };
  try {
    return { value: await load() };
  } catch (error) {
    return { denied: error.message };
  }
}

export async function overviewPage({ main, onLeave }) {
  const dayAgo = new Date(Date.now() - 24 * 3600e3).toISOString();
  const [byStatus, byType, failed, blocked, lease, schedules, queues] = await Promise.all([
    optional("workflows:read", () => get("/workflows/aggregate?group_by=status")),
    optional("workflows:read", () => get("/workflows/aggregate?group_by=type")),
    optional("workflows:read", () => get("/workflows" + qs({ status: "failed", updated_after: dayAgo, limit: 1000 }))),
    optional("workflows:read", () => get("/workflows?status=blocked&limit=20")),
    optional("system:read", () => get("/system/lease")),
    optional("schedules:read", () => get("/schedules")),
    optional("workflows:read", () => Promise.all([get("/queues"), get("/workers")])),
  ]);
  const denied = (r) => h("p", { class: "muted" }, "Not shown: " + r.denied);
  const order = (groups) => groups.sort((a, b) => STATUSES.indexOf(a.key) - STATUSES.indexOf(b.key));
  const feed = h("ol", { class: "feed", "aria-label": "Live activity" });
  const feedState = h("span", { class: "live", id: "feed-state" }, "connecting…");
  const late = schedules.value
    ? schedules.value.items.filter((s) => !s.paused && s.next_fire && new Date(s.next_fire).getTime() < Date.now() - 60e3)
    : [];
  const charts = metricsCharts(["runs", "queues"]);
  clear(
    main,
    h("h1", {}, "Overview"),
    h(
      "div",
      { class: "grid" },
      section("Runs by status", byStatus.value ? counts(order(byStatus.value.groups), "status") : denied(byStatus)),
      section("Runs by type", byType.value ? counts(byType.value.groups, "type") : denied(byType)),
      section("Failures", failed.value ? failureChart(failed.value.items) : denied(failed)),
      section(
        "Engine and lease",
        lease.value
          ? h(
              "dl",
              { class: "kv" },
              h("dt", {}, "Lease"),
              h("dd", {}, badge(lease.value.state)),
              h("dt", {}, "Holder"),
              h("dd", { class: "mono" }, lease.value.holder_id || "—"),
              h("dt", {}, "Epoch"),
              h("dd", {}, lease.value.epoch ?? "—"),
              h("dt", {}, "Expires"),
              h("dd", {}, lease.value.expires_at ? fmtTime(new Date(lease.value.expires_at * 1000).toISOString()) : "—"),
            )
          : denied(lease),
      ),
      section(
        "Blocked runs",
        blocked.value
          ? blocked.value.items.length
            ? table(
                ["Run", "Type", "Since"],
                blocked.value.items.map((r) =>
                  h("tr", {}, h("td", {}, runLink(r.id)), h("td", {}, r.workflow_type), h("td", {}, fmtRelative(r.updated_at))),
                ),
              )
            : h("p", { class: "muted" }, "None: every run replays cleanly.")
          : denied(blocked),
      ),
      section(
        "Queues and workers",
        queues.value ? queueSummary(...queues.value) : denied(queues),
      ),
      section(
        "Late schedules",
        schedules.value
          ? late.length
            ? h("ul", {}, late.map((s) => h("li", {}, h("a", { href: "#/schedules/" + encodeURIComponent(s.id) }, s.id), " due ", fmtRelative(s.next_fire))))
            : h("p", { class: "muted" }, `None late (${schedules.value.items.length} schedules).`)
          : denied(schedules),
      ),
    ),
    section("Over time", charts.element, h("p", { class: "hint" }, "Sampled by this page while it is open; the system page has more.")),
    section("Live activity", feedState, session.can("events:read") ? feed : h("p", { class: "muted" }, "Not shown: needs scope events:read")),
  );
  if (!session.can("events:read")) return onLeave(charts.stop);
  const stop = follow(
    "/events/sse",
    (event) => {
      feed.prepend(eventLine(event));
      while (feed.children.length > 50) feed.lastChild.remove();
    },
    { onState: (s) => (feedState.textContent = s) },
  );
  onLeave(() => {
    stop();
    charts.stop();
  });
}
