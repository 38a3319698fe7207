// Bulk cancel, signal, retry or delete of the runs the current filters select: a dry
// run first (count and sample), then a confirmed commit with the dry run's token.
// Shown only when the server has the bulk routes and the key has workflows:admin.
import { enc, get, post, session } from "./api.js";
import { action, clear, confirmDialog, h, jsonInput, labelled, notify, parseJson, runLink } from "./dom.js";

let available = null;

async function serverHasBulk() {
  if (available === null) {
    try {
      const response = await fetch("/openapi.json");
      const doc = await response.json();
      available = Object.keys(doc.paths || {}).some((p) => p.endsWith("/bulk/{operation}"));
    } catch {
      available = false;
    }
  }
  return available;
}

function typed(text) {
  return /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : text;
}

// The runs page's URL filters as the bulk API's filter object.
export function bulkFilter(query) {
  const out = {};
  if (query.status) out.status = query.status;
  if (query.type) out.workflow_type = query.type;
  if (query.id_prefix) out.id_prefix = query.id_prefix;
  if (query.tag) out.tags = [query.tag];
  if (query.created_after) out.created_after = query.created_after;
  if (query.created_before) out.created_before = query.created_before;
  for (const [name, value] of Object.entries(query)) {
    if (!name.startsWith("attribute.")) continue;
    const rest = name.slice(10);
    const dot = rest.lastIndexOf(".");
    const bound = dot > 0 ? rest.slice(dot + 1) : "";
    out.attributes = out.attributes || {};
    if (["gt", "gte", "lt", "lte"].includes(bound)) {
      const key = rest.slice(0, dot);
      out.attributes[key] = { ...(out.attributes[key] || {}), [bound]: typed(value) };
    } else out.attributes[rest] = typed(value);
  }
  return out;
}

export async function bulkPanel(query, reload) {
  if (!session.can("workflows:admin") || !(await serverHasBulk())) return null;
  const operation = h("select", { name: "operation", id: "bulk-operation" },
    ["cancel", "signal", "retry-failed", "delete"].map((o) => h("option", { value: o }, o)));
  const signalName = h("input", { name: "signal", autocomplete: "off", id: "bulk-signal" });
  const payload = jsonInput("payload", "", 1);
  const outcome = h("div", { id: "bulk-outcome", "aria-live": "polite" });
  const filter = bulkFilter(query);
  const body = () => {
    const out = { filter };
    if (operation.value === "signal") {
      if (!signalName.value.trim()) throw new Error("Name the signal to send");
      out.signal = { name: signalName.value.trim(), payload: parseJson(payload.value, "Payload") ?? null };
    }
    return out;
  };
  const preview = action("Preview (dry run)", ["workflows:admin"], async () => {
    const op = operation.value;
    const dry = await post(`/bulk/${enc(op)}`, { ...body(), dry_run: true });
    const commit = h("button", { type: "button", class: "danger", id: "bulk-commit" }, `${op} ${dry.matched} run(s)`);
    commit.addEventListener("click", async () => {
      if (!(await confirmDialog(`${op} ${dry.matched} run(s) selected by these filters? This is recorded in the audit log.`))) return;
      commit.disabled = true;
      try {
        const done = await post(`/bulk/${enc(op)}`, { ...body(), dry_run: false, confirmation_token: dry.confirmation_token });
        clear(outcome, h("p", { role: "status" }, `${op}: ${done.applied} applied, ${done.skipped} skipped, ${Object.keys(done.failed || {}).length} failed.`));
        notify(`bulk ${op}: ${done.applied} applied`);
        reload();
      } catch (error) {
        notify(error.message, "error");
        commit.disabled = false;
      }
    });
    clear(
      outcome,
      h("p", {}, `${dry.matched} run(s) match. Sample: `, dry.sample.map((id) => [runLink(id), " "])),
      dry.matched ? commit : null,
    );
  }, { id: "bulk-preview" });
  const form = h(
    "form",
    { class: "filters", "aria-label": "Bulk action on the filtered runs" },
    labelled("Operation", operation),
    labelled("Signal name (signal only)", signalName),
    labelled("Signal payload (JSON)", payload),
    h("div", { class: "field end" }, preview),
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  return h("details", { class: "card", id: "bulk" }, h("summary", {}, "Bulk action on these runs"), form, outcome);
}
