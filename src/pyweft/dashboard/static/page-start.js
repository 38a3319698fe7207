// Start a workflow from a form generated from its registered input schema.
import { enc, get, post, session } from "./api.js";
import { action, clear, h, labelled, notify, pretty } from "./dom.js";
import { readArgs, schemaField } from "./form.js";

export async function startPage({ main, params }) {
  if (!session.can("workflows:write", "system:read")) {
    clear(main, h("h1", {}, "Start a workflow"), h("p", { class: "muted" }, "Your key lacks the scope: needs workflows:write."));
    return;
  }
  const { workflows } = await get("/registry/workflows");
  if (!workflows.length) {
    clear(main, h("h1", {}, "Start a workflow"), h("p", {}, "This engine has no registered workflows."));
    return;
  }
  const chosen = workflows.find((w) => w.workflow_type === params.get("type")) || workflows[0];
  const picker = h(
    "select",
    { id: "start-type", name: "type" },
    workflows.map((w) => h("option", { value: w.workflow_type, selected: w === chosen }, `${w.workflow_type} (v${w.version})`)),
  );
  picker.addEventListener("change", () => (location.hash = "#/start?type=" + enc(picker.value)));
  const fields = chosen.parameters.map((p) => schemaField(p, chosen.input.$defs));
  const runId = h("input", { name: "id", id: "start-id", autocomplete: "off", placeholder: "random when empty" });
  const key = h("input", { name: "idempotency_key", autocomplete: "off" });
  const tags = h("input", { name: "tags", autocomplete: "off", placeholder: "comma separated" });
  const delay = h("input", { name: "start_delay", autocomplete: "off", placeholder: "e.g. 10m" });
  const timeout = h("input", { name: "execution_timeout", autocomplete: "off", placeholder: "e.g. 1h" });
  const form = h(
    "form",
    { class: "start", id: "start-form", "aria-label": "Start " + chosen.workflow_type },
    labelled("Workflow", picker),
    chosen.description ? h("p", { class: "muted" }, chosen.description) : null,
    h("fieldset", {}, h("legend", {}, "Arguments"), fields.length ? fields.map((f) => f.element) : h("p", { class: "muted" }, "This workflow takes no arguments.")),
    h(
      "fieldset",
      {},
      h("legend", {}, "Options"),
      labelled("Run id", runId),
      labelled("Idempotency key", key, "a second start with this key returns the same run"),
      labelled("Tags", tags),
      labelled("Start delay", delay),
      labelled("Execution timeout", timeout),
    ),
    action("Start run", ["workflows:write"], async () => {
      const body = { type: chosen.workflow_type, args: readArgs(fields) };
      if (runId.value.trim()) body.id = runId.value.trim();
      if (key.value.trim()) body.idempotency_key = key.value.trim();
      const tagList = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
      if (tagList.length) body.tags = tagList;
      if (delay.value.trim()) body.start_delay = delay.value.trim();
      if (timeout.value.trim()) body.execution_timeout = timeout.value.trim();
      const made = await post("/workflows", body);
      notify(`started ${made.id}`);
      location.hash = "#/runs/" + enc(made.id);
    }, { id: "start-submit" }),
    h("details", {}, h("summary", {}, "Input and output schemas"), h("pre", { class: "mono" }, pretty({ input: chosen.input, output: chosen.output }))),
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  clear(main, h("h1", {}, "Start a workflow"), form);
}
