// One run: summary, timeline, events, lineage, and the actions its key may take.
import { enc, follow, get, post, qs, session } from "./api.js";
import {
  action,
  badge,
  clear,
  fmtTime,
  h,
  jsonInput,
  labelled,
  notify,
  parseJson,
  pretty,
  runLink,
  section,
  table,
} from "./dom.js";
import { driftDiff } from "./drift.js";
import { messageForms } from "./run-messages.js";
import { timeline } from "./timeline.js";

const TERMINAL = ["completed", "failed", "cancelled", "timed_out"];
const NO_HANDLERS = { signals: [], updates: [], queries: [] };
const HEARTBEAT_REFRESH_MS = 3000;

function summary(run) {
  const rows = [
    ["Status", badge(run.status)],
    ["Type", `${run.workflow_type} (version ${run.version})`],
    ["Created", fmtTime(run.created_at)],
    ["Updated", fmtTime(run.updated_at)],
    ["Steps", run.step_count ?? "—"],
    ["Tags", (run.tags || []).join(", ") || "—"],
    ["Cancel requested", run.cancel_requested ? "yes" : "no"],
  ];
  return h(
    "dl",
    { class: "kv", id: "run-summary" },
    rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
    run.error ? [h("dt", {}, "Error"), h("dd", {}, h("pre", { class: "error" }, `${run.error.type}: ${run.error.message}`))] : null,
    run.status === "completed" ? [h("dt", {}, "Result"), h("dd", {}, h("pre", { class: "mono", id: "run-result" }, pretty(run.result)))] : null,
    run.attributes && Object.keys(run.attributes).length
      ? [h("dt", {}, "Attributes"), h("dd", {}, h("pre", { class: "mono" }, pretty(run.attributes)))]
      : null,
  );
}

function lineage(run, children) {
  const items = [];
  if (run.parent_id) items.push(h("li", {}, "Parent: ", runLink(run.parent_id)));
  if (run.forked_from) items.push(h("li", {}, "Forked from ", runLink(run.forked_from), ` at step ${run.forked_at_step}`));
  for (const c of children) items.push(h("li", {}, "Child: ", runLink(c.id), " ", badge(c.status)));
  return items.length ? h("ul", { id: "lineage" }, items) : h("p", { class: "muted" }, "No parent, fork or children.");
}

const EVENTS_SHOWN = 200;

function events(list, all) {
  if (!list.length) return h("p", { class: "muted" }, "No events recorded.");
  const shown = all || list.length <= EVENTS_SHOWN ? list : list.slice(-EVENTS_SHOWN);
  const more =
    shown.length < list.length
      ? h("button", { type: "button", class: "link", id: "all-events" }, `Show all ${list.length} events`)
      : null;
  return h("div", {}, more ? h("p", { class: "muted" }, `The latest ${shown.length} of ${list.length}. `, more) : null, table(
    ["When", "Kind", "Step", "Detail"],
    shown.map((e) =>
      h("tr", {}, h("td", {}, fmtTime(e.at)), h("td", {}, h("span", { class: `kind k-${e.kind}` }, e.kind)), h("td", {}, e.step ?? ""), h("td", {}, h("code", {}, e.detail ? JSON.stringify(e.detail) : ""))),
    ),
  ));
}

// The fork choices follow the run's committed steps; the chosen one stays chosen.
export function setForkSteps(select, steps) {
  const chosen = select.value;
  clear(
    select,
    h("option", { value: "" }, "keep every committed step"),
    h("option", { value: "0" }, "keep no step (run again from the start)"),
    steps.filter((s) => s.status !== "open").map((s) => h("option", { value: String(s.step) }, `keep steps up to #${s.step} (${s.kind} ${s.name}), live after it`)),
  );
  select.value = chosen;
  if (select.value !== chosen) select.value = "";
}

function controls(id, run, steps, messages, refresh) {
  const finished = TERMINAL.includes(run.status);
  const write = ["workflows:write"];
  const fromStep = h("select", { name: "from_step", id: "fork-step" });
  setForkSteps(fromStep, steps);
  return h(
    "div",
    { class: "actions" },
    h(
      "div",
      { class: "row" },
      finished ? null : action("Cancel", write, async () => { await post(`/workflows/${enc(id)}/cancel`); notify("cancel requested"); refresh(); }, { confirm: `Cancel run ${id}? Its compensations run and it ends as cancelled.`, danger: true, id: "cancel-run" }),
      finished || run.status === "suspended" ? null : action("Suspend", write, async () => { await post(`/workflows/${enc(id)}/suspend`); refresh(); }, { id: "suspend-run" }),
      ["suspended", "blocked"].includes(run.status) ? action("Resume", write, async () => { await post(`/workflows/${enc(id)}/resume`); refresh(); }, { id: "resume-run" }) : null,
    ),
    h(
      "div",
      { class: "row fork" },
      labelled("Fork", fromStep, "A new run that reuses this run's recorded steps up to the chosen one and runs live after it."),
      action("Fork run", write, async () => {
        const body = fromStep.value ? { from_step: Number(fromStep.value) } : {};
        const made = await post(`/workflows/${enc(id)}/fork`, body);
        notify(`forked as ${made.id}`);
        location.hash = "#/runs/" + enc(made.id);
      }, { confirm: `Start a new run from ${id}'s journal?`, id: "fork-run" }),
    ),
    messages.element,
  );
}

// Activities waiting for completion by token: complete with a result, or fail.
function pendingActivities(items, refresh) {
  if (!items.length) return null;
  const write = ["workflows:write", "workers:write"];
  return section(
    "Activities waiting for completion",
    items.map((a) => {
      const value = jsonInput("result", "");
      const form = h(
        "form",
        { class: "message", "aria-label": `Complete ${a.activity}`, dataset: { step: a.step } },
        h("p", {}, `#${a.step} ${a.activity}, attempt ${a.attempt}, waiting since ${fmtTime(a.since)}`),
        a.heartbeat_details !== null && a.heartbeat_details !== undefined
          ? h("pre", { class: "mono" }, "progress: " + pretty(a.heartbeat_details))
          : null,
        labelled("Result, or the reason when failing (JSON for a result)", value),
        h(
          "div",
          { class: "row" },
          action("Complete", write, async () => {
            await post("/activities/complete", { token: a.token, result: parseJson(value.value, "Result") ?? null });
            notify(`${a.activity} completed`);
            refresh();
          }),
          action("Fail", write, async () => {
            if (!value.value.trim()) throw new Error("Say why it failed");
            await post("/activities/fail", { token: a.token, error: value.value.trim() });
            notify(`${a.activity} failed`);
            refresh();
          }, { danger: true, confirm: `Fail ${a.activity}? It is retried per its policy.` }),
        ),
      );
      form.addEventListener("submit", (e) => e.preventDefault());
      return form;
    }),
  );
}

function reviewsOf(reviews) {
  if (!reviews.length) return null;
  return section(
    "Pending reviews",
    h("ul", {}, reviews.map((r) => h("li", {}, `${r.review_type} `, h("a", { href: "#/reviews" }, "open the inbox"), r.deadline ? ` · due ${fmtTime(r.deadline)}` : ""))),
  );
}

export async function runPage({ main, onLeave }, id) {
  const slots = {
    title: h("div", {}),
    summary: h("div", {}),
    drift: h("div", {}),
    reviews: h("div", {}),
    waiting: h("div", {}),
    timeline: h("div", {}),
    events: h("div", {}),
    lineage: h("div", {}),
    actions: h("div", {}),
  };
  let lastStatus = null;
  const messages = messageForms(id);
  // What the live run takes, for the message forms. None known (not running, a key
  // that may not ask, an engine slow to answer): the forms take any name and raw JSON.
  async function refreshHandlers(status) {
    const live = !TERMINAL.includes(status);
    const ask = status === "running" && session.can("workflows:read", "queries:read", "signals:write", "updates:write");
    const handlers = ask ? await get(`/workflows/${enc(id)}/handlers`).catch(() => NO_HANDLERS) : NO_HANDLERS;
    if (status === lastStatus) messages.update(handlers, live); // not an answer overtaken by a later status
  }
  let shownTokens = null;
  let allEvents = false;
  let stepCount = -1;
  async function load() {
    const [run, history, children, reviews, waiting] = await Promise.all([
      get(`/workflows/${enc(id)}`),
      session.can("workflows:read", "events:read") ? get(`/workflows/${enc(id)}/history`) : Promise.resolve({ steps: [], events: [] }),
      get("/workflows" + qs({ parent_id: id, limit: 100 })),
      session.can("reviews:read") ? get("/reviews" + qs({ workflow_id: id })) : Promise.resolve({ items: [] }),
      get("/activities/pending" + qs({ workflow_id: id })).catch(() => ({ items: [] })),
    ]);
    clear(slots.title, h("h1", {}, "Run ", h("span", { class: "mono" }, id)), h("p", {}, badge(run.status), " ", h("a", { href: "#/runs" + qs({ type: run.workflow_type }) }, "other " + run.workflow_type + " runs")));
    clear(slots.summary, section("Summary", summary(run)));
    clear(slots.drift, run.drift ? section("Code drift", driftDiff(run.drift, history.steps)) : null);
    clear(slots.reviews, reviewsOf(reviews.items));
    const tokens = waiting.items.map((a) => a.token).join(" ");
    if (tokens !== shownTokens) clear(slots.waiting, pendingActivities(waiting.items, () => schedule()));
    shownTokens = tokens;
    // Steps the user opened stay open when the timeline is redrawn by a live update.
    const opened = new Set([...slots.timeline.querySelectorAll("details[open]")].map((d) => d.dataset.step));
    clear(slots.timeline, section(`Timeline (${history.steps.length} steps)`, timeline(run, history.steps, opened)));
    const eventsBox = section("Events", events(history.events, allEvents));
    const showAll = eventsBox.querySelector("#all-events");
    if (showAll) showAll.addEventListener("click", () => { allEvents = true; schedule(); });
    clear(slots.events, eventsBox);
    clear(slots.lineage, section("Lineage", lineage(run, children.items)));
    // The forms keep what the user typed: they are redrawn only when the run's status
    // changes what is allowed; new steps only refresh the fork choices.
    if (run.status !== lastStatus) {
      clear(slots.actions, section("Actions", controls(id, run, history.steps, messages, () => schedule())));
    } else if (history.steps.length !== stepCount) {
      const select = slots.actions.querySelector("#fork-step");
      if (select) setForkSteps(select, history.steps);
    }
    lastStatus = run.status;
    // Not awaited: a run driven by another process answers within its poll interval,
    // and the page should not wait for that to show the rest.
    refreshHandlers(run.status).catch(() => {});
    stepCount = history.steps.length;
    return run;
  }
  const run = await load();
  clear(main, slots.title, slots.drift, h("div", { class: "cols" }, h("div", {}, slots.summary, slots.reviews, slots.waiting, slots.actions, slots.lineage), h("div", {}, slots.timeline, slots.events)));
  let timer = null;
  function schedule() {
    if (!timer) timer = setTimeout(() => { timer = null; load().catch((e) => notify(e.message, "error")); }, 100);
  }
  if (!session.can("events:read") || TERMINAL.includes(run.status)) return;
  const stop = follow(`/workflows/${enc(id)}/events/sse`, schedule);
  // Heartbeats are not events: while a step is open, reread so its progress stays current.
  const beat = setInterval(() => {
    if (slots.timeline.querySelector('details[data-kind="activity"][data-status="open"]')) schedule();
    // A handler registered or a wait begun is no event: look again while it runs.
    else if (lastStatus === "running") refreshHandlers(lastStatus).catch(() => {});
  }, HEARTBEAT_REFRESH_MS);
  onLeave(() => {
    stop();
    clearInterval(beat);
    if (timer) clearTimeout(timer);
  });
}
