// Runs: filters kept in the URL, cursor paging, rows that follow the live feed.
import { follow, get, qs, session } from "./api.js";
import { bulkPanel } from "./bulk.js";
import { badge, clear, fmtRelative, fmtTime, h, labelled, runLink, scroller } from "./dom.js";

const STATUSES = ["", "pending", "enqueued", "running", "suspended", "blocked", "completed", "failed", "cancelled", "timed_out"];
const FILTERS = ["status", "type", "id_prefix", "tag", "created_after", "created_before"];

function localValue(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  return new Date(d.getTime() - d.getTimezoneOffset() * 60e3).toISOString().slice(0, 16);
}

function filterForm(params, types) {
  const status = h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s || "any")));
  const type = h("select", { name: "type" }, [
    h("option", { value: "" }, "any"),
    ...types.map((t) => h("option", { value: t, selected: params.get("type") === t }, t)),
  ]);
  const idPrefix = h("input", { name: "id_prefix", value: params.get("id_prefix") || "", autocomplete: "off" });
  const tag = h("input", { name: "tag", value: params.get("tag") || "", autocomplete: "off" });
  const attrs = [...params.entries()].filter(([k]) => k.startsWith("attribute.")).map(([k, v]) => `${k.slice(10)}=${v}`);
  const attribute = h("input", { name: "attribute", value: attrs.join(", "), autocomplete: "off", placeholder: "region=eu, amount.gte=10" });
  const after = h("input", { type: "datetime-local", name: "created_after", value: localValue(params.get("created_after")) });
  const before = h("input", { type: "datetime-local", name: "created_before", value: localValue(params.get("created_before")) });
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter runs" },
    labelled("Status", status),
    labelled("Type", type),
    labelled("Id starts with", idPrefix),
    labelled("Tag", tag),
    labelled("Search attributes", attribute),
    labelled("Created after", after),
    labelled("Created before", before),
    h("div", { class: "field end" }, h("button", { type: "submit", id: "apply-filters" }, "Apply"), h("a", { href: "#/runs", class: "button" }, "Clear")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const name of FILTERS) {
      let value = form.elements[name].value.trim();
      if (value && form.elements[name].type === "datetime-local") value = new Date(value).toISOString();
      if (value) next.set(name, value);
    }
    // "name=value" or "name.gte=value", comma separated: the API's attribute.<...> filters.
    for (const pair of attribute.value.split(",")) {
      const at = pair.indexOf("=");
      if (at > 0) next.set("attribute." + pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
    location.hash = "#/runs" + (next.toString() ? "?" + next : "");
  });
  return form;
}

function row(run) {
  return h(
    "tr",
    { dataset: { id: run.id } },
    h("td", {}, runLink(run.id)),
    h("td", {}, run.workflow_type),
    h("td", { class: "status" }, badge(run.status)),
    h("td", {}, run.step_count ?? "—"),
    h("td", {}, h("time", { datetime: run.created_at, title: run.created_at }, fmtTime(run.created_at))),
    h("td", {}, fmtRelative(run.updated_at)),
    h("td", {}, (run.tags || []).map((t) => h("span", { class: "tag" }, t))),
  );
}

export async function runsPage({ main, params, onLeave }) {
  const query = {};
  for (const name of [...FILTERS, "cursor"]) if (params.get(name)) query[name] = params.get(name);
  for (const [name, value] of params.entries()) if (name.startsWith("attribute.")) query[name] = value;
  let timer = null;
  let reload = async () => {}; // set once the table exists
  const [page, registry, bulk] = await Promise.all([
    get("/workflows" + qs({ ...query, limit: 50 })),
    session.can("system:read") ? get("/registry") : Promise.resolve({ workflows: [] }),
    bulkPanel(query, () => reload()),
  ]);
  const types = registry.workflows.map((w) => w.type);
  const tbody = h("tbody", {}, page.items.map(row));
  const liveState = h("span", { class: "live", id: "runs-live" }, "");
  const next = new URLSearchParams(params);
  next.set("cursor", page.next_cursor || "");
  clear(
    main,
    h("h1", {}, "Runs"),
    filterForm(params, types),
    bulk,
    h("p", { class: "muted", id: "runs-count" }, `${page.items.length} run(s) on this page`, " ", liveState),
    scroller(h(
      "table",
      { id: "runs-table" },
      h("caption", { class: "sr-only" }, "Runs, newest first"),
      h("thead", {}, h("tr", {}, ["Id", "Type", "Status", "Steps", "Created", "Updated", "Tags"].map((t) => h("th", { scope: "col" }, t)))),
      tbody,
    )),
    page.items.length ? null : h("p", { class: "muted" }, "No runs match these filters."),
    h(
      "nav",
      { class: "pager", "aria-label": "Pages" },
      params.get("cursor") ? h("button", { type: "button", onclick: () => history.back() }, "← Previous") : null,
      page.next_cursor ? h("a", { class: "button", href: "#/runs?" + next, id: "next-page" }, "Next →") : null,
    ),
  );
  reload = async () => {
    timer = null;
    try {
      const fresh = await get("/workflows" + qs({ ...query, limit: 50 }));
      clear(tbody, fresh.items.map(row));
      document.getElementById("runs-count").firstChild.textContent = `${fresh.items.length} run(s) on this page`;
    } catch (error) {
      liveState.textContent = "update failed: " + error.message;
    }
  };
  if (!session.can("events:read")) return;
  // Live: reload this page shortly after any event about a run of this type (the
  // server pages newest first, so new runs appear at the top of the first page).
  const stop = follow(
    "/events/sse" + qs({ type: query.type }),
    (event) => {
      if (!event.workflow_id) return;
      if (query.cursor && !tbody.querySelector(`tr[data-id="${CSS.escape(event.workflow_id)}"]`)) return;
      if (!timer) timer = setTimeout(reload, 150);
    },
    { onState: (s) => (liveState.textContent = s === "live" ? "● live" : s) },
  );
  onLeave(() => {
    stop();
    if (timer) clearTimeout(timer);
  });
}
