// Schedules: the list with next fire times, and one schedule's detail with pause,
// resume, trigger and backfill.
import { api, enc, get, post, session } from "./api.js";
import { action, badge, clear, fmtRelative, fmtTime, h, jsonInput, labelled, notify, parseJson, runLink, section, table } from "./dom.js";

const OVERLAPS = ["skip", "buffer_one", "buffer_all", "cancel_previous", "allow_all"];

// Cadence and policy fields shared by the create and edit forms.
function cadenceFields(s) {
  const f = {
    cron: h("input", { name: "cron", autocomplete: "off", placeholder: "0 3 * * *", value: s?.cron || "" }),
    every: h("input", { name: "every", autocomplete: "off", placeholder: "e.g. 15m (instead of cron)", value: s?.every_s ? `${s.every_s}s` : "" }),
    timezone: h("input", { name: "timezone", autocomplete: "off", value: s?.timezone || "UTC" }),
    overlap: h("select", { name: "overlap" }, OVERLAPS.map((o) => h("option", { value: o, selected: (s?.overlap || "skip") === o }, o))),
  };
  const body = () => {
    const out = { timezone: f.timezone.value.trim() || "UTC", overlap: f.overlap.value };
    if (f.cron.value.trim()) out.cron = f.cron.value.trim();
    if (f.every.value.trim()) out.every = f.every.value.trim();
    return out;
  };
  const elements = [labelled("Cron", f.cron), labelled("Every", f.every), labelled("Time zone", f.timezone), labelled("When runs overlap", f.overlap)];
  return { elements, body };
}

async function createForm(refresh) {
  if (!session.can("schedules:write")) return null;
  const registry = session.can("system:read", "workflows:write") ? await get("/registry/workflows") : { workflows: [] };
  const id = h("input", { name: "id", id: "new-schedule-id", autocomplete: "off", required: true });
  const type = h("select", { name: "type", id: "new-schedule-type" }, registry.workflows.map((w) => h("option", { value: w.workflow_type }, w.workflow_type)));
  const args = jsonInput("args", "[]", 2);
  const fields = cadenceFields(null);
  const form = h(
    "form",
    { class: "filters", id: "new-schedule", "aria-label": "New schedule" },
    labelled("Id", id),
    labelled("Workflow", type),
    labelled("Arguments (JSON array)", args),
    fields.elements,
    h("div", { class: "field end" }, action("Create", ["schedules:write"], async () => {
      if (!id.value.trim()) throw new Error("Give the schedule an id");
      const body = { id: id.value.trim(), type: type.value, args: parseJson(args.value, "Arguments") ?? [], ...fields.body() };
      await post("/schedules", body);
      notify(`schedule ${body.id} created`);
      refresh();
    }, { id: "create-schedule" })),
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  return h("details", { class: "card" }, h("summary", {}, "New schedule"), form);
}

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
  const create = await createForm(refresh);
  clear(
    main,
    h("h1", {}, "Schedules"),
    create,
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
  const editFields = cadenceFields(s);
  const edit = h(
    "form",
    { id: "edit-schedule", "aria-label": "Edit the schedule" },
    editFields.elements,
    h("div", { class: "row" },
      action("Save", ["schedules:write"], async () => {
        const body = editFields.body();
        if (body.cron && body.every) throw new Error("Give a cron expression or an interval, not both");
        await api("PATCH", `/schedules/${enc(id)}`, body);
        notify(`${id} saved`);
        refresh();
      }, { id: "save-schedule" }),
      action("Delete", ["schedules:write"], async () => {
        await api("DELETE", `/schedules/${enc(id)}`);
        notify(`${id} deleted`);
        location.hash = "#/schedules";
      }, { danger: true, confirm: `Delete schedule ${id}? Runs it started are kept.`, id: "delete-schedule" }),
    ),
  );
  edit.addEventListener("submit", (e) => e.preventDefault());
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
        section("Edit", edit),
      ),
    ),
  );
}
