// A blocked run's code drift as a side-by-side diff: on the left what the journal
// recorded, on the right what the code asks for now, step by step up to the one where
// they part (from the run's `drift` field and its history).
import { h, scroller } from "./dom.js";

const REASONS = {
  step_mismatch: "the code asks for another call at this step",
  returned_early: "the code returned before reaching the recorded steps",
  handler_mismatch: "a recorded signal or update application has no matching handler",
  version_pin: "a ctx.get_version pin is outside the range the code supports",
  workflow_version: "the run's workflow version is not registered here",
};
const CONTEXT_STEPS = 3; // replayed steps shown before the one that drifted

function call(side, cls) {
  if (!side.kind) return h("td", { class: cls }, h("span", { class: "call" }, side.detail || "nothing"));
  return h(
    "td",
    { class: cls },
    h("span", { class: "call mono" }, side.kind, " ", h("strong", {}, side.name ?? "")),
    side.args !== null && side.args !== undefined ? h("span", { class: "args mono" }, " arguments " + side.args) : null,
    side.detail ? h("span", { class: "detail" }, " — " + side.detail) : null,
  );
}

export function driftDiff(drift, steps) {
  const at = drift.step;
  const before = at === null || at === undefined ? [] : steps.filter((s) => s.step < at && s.status !== "open").slice(-CONTEXT_STEPS);
  const rows = before.map((s) =>
    h(
      "tr",
      { class: "same" },
      h("th", { scope: "row" }, `#${s.step}`),
      h("td", {}, h("span", { class: "call mono" }, s.kind, " ", h("strong", {}, s.name)), h("span", { class: "detail" }, " — " + s.status)),
      h("td", { class: "muted" }, "the same (replayed from the journal)"),
    ),
  );
  rows.push(
    h(
      "tr",
      { class: "changed", id: "drift-row" },
      h("th", { scope: "row" }, at === null || at === undefined ? drift.recorded.kind : `#${at}`),
      call(drift.recorded, "was"),
      call(drift.requested, "now"),
    ),
  );
  return h(
    "div",
    { id: "drift-diff" },
    h(
      "p",
      {},
      at === null || at === undefined ? "The code no longer replays this run: " : `The code no longer replays this run at step ${at}: `,
      REASONS[drift.reason] || drift.reason,
      ". Deploy code that replays it (the run then resumes by itself, or press Resume), or fail or cancel it.",
    ),
    scroller(
      h(
        "table",
        { class: "diff" },
        h("caption", { class: "sr-only" }, "What the journal recorded beside what the code asks for now"),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Step"), h("th", { scope: "col" }, "Journal recorded"), h("th", { scope: "col" }, "Code now asks for"))),
        h("tbody", {}, rows),
      ),
    ),
    h("p", { class: "hint" }, "Arguments are shown by type only; the journal keeps no call arguments."),
  );
}
