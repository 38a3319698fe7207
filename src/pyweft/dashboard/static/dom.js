// Small DOM helpers: element building (text is always set as text, never as HTML),
// formatting, scope-aware action buttons, confirmations and notices.
import { session } from "./api.js";

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2).toLowerCase(), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// One formatter for the page: toLocaleString with options builds a new one per call,
// which costs a run page with a thousand events hundreds of milliseconds.
const TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "medium" });

export function fmtTime(iso) {
  if (!iso) return "—";
  return TIME.format(new Date(iso));
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.round(s % 60)}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function fmtRelative(iso) {
  if (!iso) return "—";
  const ms = new Date(iso).getTime() - Date.now();
  return (ms >= 0 ? "in " : "") + fmtDuration(Math.abs(ms)) + (ms < 0 ? " ago" : "");
}

export function pretty(value) {
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
}

export function badge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

export function runLink(id) {
  return h("a", { href: "#/runs/" + encodeURIComponent(id) }, id);
}

// A button for an action that needs one of `scopes`: disabled with the reason shown
// (and read out by screen readers) when the signed-in key lacks them.
export function action(label, scopes, run, { confirm: question, danger, id } = {}) {
  const allowed = !scopes.length || session.can(...scopes);
  const reason = allowed ? null : `Your key lacks the scope: needs ${scopes.join(" or ")}`;
  const button = h(
    "button",
    {
      type: "button",
      class: danger ? "danger" : "",
      disabled: !allowed,
      title: reason || undefined,
      "aria-label": reason ? `${label} (disabled: ${reason})` : undefined,
      id,
    },
    label,
  );
  button.addEventListener("click", async () => {
    if (question && !(await confirmDialog(question))) return;
    button.disabled = true;
    try {
      await run();
    } catch (error) {
      notify(error.message || String(error), "error");
    } finally {
      button.disabled = !allowed;
    }
  });
  if (!reason) return button;
  return h("span", { class: "gated" }, button, h("small", { class: "reason" }, reason));
}

export function confirmDialog(question) {
  return new Promise((resolve) => {
    const yes = h("button", { type: "button", class: "danger", value: "yes" }, "Confirm");
    const no = h("button", { type: "button", value: "no" }, "Keep it");
    const dialog = h(
      "dialog",
      { "aria-labelledby": "confirm-title", class: "confirm" },
      h("h2", { id: "confirm-title" }, "Are you sure?"),
      h("p", {}, question),
      h("div", { class: "row" }, no, yes),
    );
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    yes.addEventListener("click", () => done(true));
    no.addEventListener("click", () => done(false));
    dialog.addEventListener("cancel", () => done(false));
    document.body.append(dialog);
    dialog.showModal();
    no.focus();
  });
}

export function notify(message, kind = "info") {
  const box = document.getElementById("notices");
  const note = h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, message);
  box.append(note);
  setTimeout(() => note.remove(), kind === "error" ? 8000 : 4000);
}

export function section(title, ...children) {
  return h("section", { class: "card" }, h("h2", {}, title), ...children);
}

export function table(headers, rows, { caption } = {}) {
  return scroller(h(
    "table",
    {},
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows),
  ));
}

// Wide content scrolls inside its own box instead of widening the page on a phone.
export function scroller(el) {
  return h("div", { class: "scroll" }, el);
}

export function labelled(label, control, hint) {
  const id = control.id || "f-" + Math.random().toString(36).slice(2, 9);
  control.id = id;
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    control,
    hint ? h("small", { class: "hint" }, hint) : null,
  );
}

export function jsonInput(name, value, rows = 3) {
  return h("textarea", { name, rows, spellcheck: "false", class: "mono" }, value ?? "");
}

export function parseJson(text, what) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${what} is not valid JSON: ${error.message}`);
  }
}
