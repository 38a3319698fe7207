// A run's steps as a timeline chart: one row per step, a bar from its start to its end
// on the run's time axis, with attempts, status and duration; each row expands to the
// step's decoded result or error. Built for 1,000+ steps: rows are plain elements and
// a step's payload is rendered only when its row is opened.
import { fmtDuration, h, pretty } from "./dom.js";

function short(value) {
  const text = JSON.stringify(value);
  return text.length > 120 ? text.slice(0, 117) + "…" : text;
}

export function timeline(run, steps, opened = new Set()) {
  if (!steps.length) return h("p", { class: "muted" }, "No steps yet.");
  const t0 = new Date(run.created_at).getTime();
  const now = Date.now();
  let t1 = t0 + 1;
  for (const s of steps) {
    const end = s.finished_at ? new Date(s.finished_at).getTime() : now;
    if (end > t1) t1 = end;
  }
  const span = t1 - t0;
  const list = h("ol", { class: "timeline", id: "timeline", "aria-label": `${steps.length} steps` });
  const fragment = document.createDocumentFragment();
  for (const s of steps) {
    const start = new Date(s.started_at).getTime();
    const end = s.finished_at ? new Date(s.finished_at).getTime() : now;
    const bar = h("span", { class: `bar st-${s.status}` });
    bar.style.marginLeft = (((start - t0) / span) * 100).toFixed(3) + "%";
    bar.style.width = Math.max(((end - start) / span) * 100, 0.4).toFixed(3) + "%";
    const summary = h(
      "summary",
      {},
      h("span", { class: "num" }, "#" + s.step),
      h("span", { class: "name", title: `${s.kind} ${s.name}` }, h("span", { class: "muted" }, s.kind + " "), s.name),
      h("span", { class: "track" }, bar),
      h("span", { class: `st st-${s.status}` }, s.status),
      h("span", { class: "dur" }, s.finished_at ? fmtDuration(end - start) : "…"),
      h("span", { class: "att", title: "attempts" }, s.attempts > 1 ? `×${s.attempts}` : ""),
    );
    const beating = s.status === "open" && s.heartbeat_details !== null && s.heartbeat_details !== undefined;
    const item = h("details", { class: "step", dataset: { step: s.step, kind: s.kind, status: s.status } }, summary);
    const fill = () => {
      if (item.childElementCount > 1) return;
      item.append(
        h(
          "div",
          { class: "step-body" },
          h("p", { class: "muted" }, `started ${s.started_at}`, s.finished_at ? ` · finished ${s.finished_at}` : " · not finished", s.next_attempt_at ? ` · next attempt ${s.next_attempt_at}` : ""),
          beating ? h("pre", { class: "mono" }, `progress (heartbeat ${s.heartbeat_at}):\n` + pretty(s.heartbeat_details)) : null,
          s.error
            ? h("pre", { class: "error" }, `${s.error.type}: ${s.error.message}`)
            : s.status === "open" ? null : h("pre", { class: "mono" }, pretty(s.result) || "null"),
        ),
      );
    };
    item.addEventListener("toggle", () => item.open && fill());
    if (opened.has(String(s.step))) {
      item.open = true;
      fill();
    }
    // A running activity's progress shows without opening the row.
    const progress = beating
      ? h("p", { class: "progress mono", title: `heartbeat at ${s.heartbeat_at}` }, "progress: " + short(s.heartbeat_details))
      : null;
    fragment.append(h("li", {}, item, progress));
  }
  list.append(fragment);
  return h(
    "div",
    {},
    h("p", { class: "muted" }, `Axis: ${fmtDuration(span)} from the run's creation. Open a step for its result.`),
    list,
  );
}
