// System: version, who you are, lease health, and the registry with its schemas.
import { get, session } from "./api.js";
import { metricsCharts } from "./charts.js";
import { badge, clear, h, pretty, section, table } from "./dom.js";

export async function systemPage({ main, onLeave }) {
  const p = session.principal;
  const [version, lease, registry] = await Promise.all([
    get("/version"),
    session.can("system:read") ? get("/system/lease") : Promise.resolve(null),
    session.can("system:read", "workflows:write") ? get("/registry/workflows") : Promise.resolve(null),
  ]);
  const charts = metricsCharts();
  onLeave(charts.stop);
  clear(
    main,
    h("h1", {}, "System"),
    h(
      "div",
      { class: "grid" },
      section("Server", h("dl", { class: "kv" }, h("dt", {}, "pyweft"), h("dd", { id: "version" }, version.version), h("dt", {}, "API"), h("dd", {}, version.api), h("dt", {}, "Metrics"), h("dd", {}, h("a", { href: "/api/v1/metrics" }, "Prometheus text")), h("dt", {}, "OpenAPI"), h("dd", {}, h("a", { href: "/openapi.json" }, "/openapi.json")))),
      section("You", h("dl", { class: "kv" }, h("dt", {}, "Subject"), h("dd", {}, p.subject), h("dt", {}, "Signed in by"), h("dd", {}, p.method), h("dt", {}, "Scopes"), h("dd", {}, p.scopes.map((s) => h("span", { class: "tag" }, s))))),
      section(
        "Ownership",
        lease
          ? h("dl", { class: "kv" }, Object.entries(lease).map(([k, v]) => [h("dt", {}, k), h("dd", {}, k === "state" ? badge(v) : v ?? "—")]))
          : h("p", { class: "muted" }, "Not shown: needs scope system:read"),
      ),
    ),
    section("Metrics over time", charts.element),
    section(
      "Registry",
      registry
        ? table(
            ["Workflow", "Version", "Arguments", "Schemas"],
            registry.workflows.map((w) =>
              h(
                "tr",
                {},
                h("td", {}, h("a", { href: "#/start?type=" + encodeURIComponent(w.workflow_type) }, w.workflow_type)),
                h("td", {}, w.version),
                h("td", { class: "mono" }, w.parameters.map((a) => a.name + (a.required ? "" : "?")).join(", ") || "—"),
                h("td", {}, h("details", {}, h("summary", {}, "JSON Schema"), h("pre", { class: "mono" }, pretty({ input: w.input, output: w.output })))),
              ),
            ),
          )
        : h("p", { class: "muted" }, "Not shown: needs scope system:read"),
    ),
  );
}
