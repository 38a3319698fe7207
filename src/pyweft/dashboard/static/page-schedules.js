// Schedules: the list with next fire times, and one schedule's detail with pause,
// resume, trigger and backfill.
import { enc, get, post, session } from "./api.js";
import { action, badge, clear, fmtRelative, fmtTime, h, labelled, notify, runLink, section, table } from "./dom.js";

const cadence = (s) => s.cron ? `cron ${s.cron} (${s.timezone})` : `every ${s.every_s}s`;

function controls(s, reload) {
  const write = ["schedules:write"];
  return h(
    "span",
    { class: "row" },
    s.paused
      ? action("Resume", write, async () => { await post(`/schedules/${enc(s.id)}/resume`); notify(`${s.id} resumed`); reload(); }, { id: `resume-${s.id}` })
      : action("Pause", write, async () => { await post(`/schedules/${enc(s.id)}/pause`); notify(`${s.id} paused`); reload(); }, { id: `pause-${s.id}` }),
    action("Trigger now", write, async () => {
      const made = await post(`/schedules/${enc(s.id)}/trigger`);
      notify(`started ${made.id}`);
      reload();
    }, { confirm: `Start one run of ${s.id} now?`, id: `trigger-${s.id}` }),
  );
}

export async function schedulesPage({ main, refresh }) {
  if (!session.can("schedules:read")) {
    clear(main, h("h1", {}, "Schedules"), h("p", { class: "muted" }, "Your key lacks the scope: needs schedules:read."));
    return;
  }
  const { items } = await get("/schedules");
  clear(
    main,
    h("h1", {}, "Schedules"),
    items.length
      ? table(
          ["Id", "Workflow", "Cadence", "Next fire", "Last fire", "State", "Fired / missed", "Actions"],
          items.map((s) =>
            h(
              "tr",
              { dataset: { schedule: s.id } },
              h("td", {}, h("a", { href: "#/schedules/" + enc(s.id) }, s.id)),
              h("td", {}, s.workflow_type),
              h("td", { class: "mono" }, cadence(s)),
              h("td", {}, s.paused ? "—" : fmtRelative(s.next_fire)),
              h("td", {}, fmtTime(s.last_fire)),
              h("td", {}, badge(s.paused ? "paused" : "active")),
              h("td", {}, `${s.fired} / ${s.missed}`),
              h("td", {}, controls(s, refresh)),
            ),
          ),
          { caption: `${items.length} schedule(s)` },
        )
      : h("p", { class: "muted" }, "No schedules. Create them in code (@workflow(schedule=...)) or with engine.create_schedule."),
  );
}

export async function scheduleDetailPage({ main, refresh }, id) {
  const { schedule: s, next_fires } = await get(`/schedules/${enc(id)}?preview=10`);
  const start = h("input", { type: "datetime-local", name: "start", required: true });
  const end = h("input", { type: "datetime-local", name: "end", required: true });
  const kv = [
    ["State", badge(s.paused ? "paused" : "active")],
    ["Workflow", s.workflow_type],
    ["Cadence", cadence(s)],
    ["Overlap policy", s.overlap],
    ["Catch-up", `${s.catchup} (window ${s.catchup_window_s}s)`],
    ["Jitter", `${s.jitter_s}s`],
    ["Origin", s.origin],
    ["Fired", s.fired],
    ["Skipped by overlap", s.skipped],
    ["Missed", s.last_missed ? `${s.missed} (latest: ${s.last_missed.count} between ${fmtTime(s.last_missed.start)} and ${fmtTime(s.last_missed.end)})` : s.missed],
    ["Last run", s.last_run_id ? runLink(s.last_run_id) : "—"],
    ["Running", s.running.length ? s.running.map((r) => [runLink(r), " "]) : "—"],
  ];
  const backfill = h(
    "form",
    { id: "backfill-form", "aria-label": "Backfill" },
    labelled("From", start),
    labelled("To", end),
    action("Backfill", ["schedules:write"], async () => {
      if (!start.value || !end.value) throw new Error("Choose both ends of the window");
      const made = await post(`/schedules/${enc(id)}/backfill`, { start: new Date(start.value).toISOString(), end: new Date(end.value).toISOString() });
      notify(`backfill started ${made.started} run(s)`);
      refresh();
    }, { confirm: "Run every occurrence in this window?" }),
  );
  backfill.addEventListener("submit", (e) => e.preventDefault());
  clear(
    main,
    h("h1", {}, "Schedule ", h("span", { class: "mono" }, s.id)),
    s.description ? h("p", {}, s.description) : null,
    h(
      "div",
      { class: "cols" },
      h("div", {}, section("Summary", h("dl", { class: "kv" }, kv.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))), section("Actions", controls(s, refresh))),
      h(
        "div",
        {},
        section("Next fire times", s.paused ? h("p", { class: "muted" }, "Paused: nothing fires.") : h("ol", { id: "next-fires" }, next_fires.map((t) => h("li", {}, fmtTime(t), " ", h("span", { class: "muted" }, fmtRelative(t)))))),
        section("Backfill a past window", backfill),
      ),
    ),
  );
}
