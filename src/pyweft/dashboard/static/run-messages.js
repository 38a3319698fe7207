// The run page's signal, update and query forms. The names come from what the live run
// takes (GET /workflows/{id}/handlers), and the payload or argument fields from each
// handler's JSON Schema; a name the run has not declared, or one without a schema,
// gets the raw-JSON editor, which every form also offers as an option.
import { enc, post } from "./api.js";
import { action, clear, h, jsonInput, labelled, notify, parseJson, pretty } from "./dom.js";
import { schemaInput } from "./schema-fields.js";

const OTHER = "\u0000other";
const TITLES = { signal: "Signal", update: "Update", query: "Query" };

function nameChoice(kind, known, onChange) {
  const typed = h("input", { name: "name", autocomplete: "off" });
  if (!known.length) {
    typed.addEventListener("input", () => onChange(typed.value.trim()));
    return { element: labelled(`${TITLES[kind]} name`, typed), value: () => typed.value.trim() };
  }
  const select = h(
    "select",
    { name: "name-choice" },
    known.map((k) => h("option", { value: k.name }, k.name + (k.waiting ? " (the run waits for it)" : ""))),
    h("option", { value: OTHER }, "another name…"),
  );
  const other = labelled(`Other ${kind} name`, typed);
  other.hidden = true;
  select.addEventListener("change", () => {
    other.hidden = select.value !== OTHER;
    onChange(select.value === OTHER ? typed.value.trim() : select.value);
  });
  typed.addEventListener("input", () => onChange(typed.value.trim()));
  return {
    element: h("div", {}, labelled(`${TITLES[kind]} name`, select), other),
    value: () => (select.value === OTHER ? typed.value.trim() : select.value),
  };
}

// The value part of the form for one handler: generated fields, or the JSON editor.
function valueEditor(kind, handler) {
  const query = kind === "query";
  const params = handler ? handler.parameters : null;
  const typed = params && (query || params.length <= 1) && params.some((p) => Object.keys(p.schema).length);
  const defs = (handler && handler.input && handler.input.$defs) || {};
  const rawLabel = query ? "Arguments (JSON array)" : "Payload (JSON)";
  const raw = jsonInput("payload", "");
  const rawField = labelled(rawLabel, raw);
  if (handler && params.length === 0) {
    const none = query ? "no arguments" : "no payload";
    return { element: h("p", { class: "muted" }, `${handler.name} takes ${none}.`), read: () => (query ? [] : undefined) };
  }
  if (!typed) {
    const hint = handler ? (handler.waiting ? "Waited for with no declared type: any JSON." : "No schema known: any JSON.") : null;
    return { element: h("div", {}, rawField, hint ? h("small", { class: "hint" }, hint) : null), read: () => parseJson(raw.value, rawLabel) };
  }
  const fields = params.map((p) =>
    schemaInput(p.schema, defs, { label: p.name, name: p.name, required: p.required, value: p.required ? undefined : p.default }),
  );
  const readFields = () => {
    const values = [];
    let missing = false;
    for (const [i, f] of fields.entries()) {
      const v = f.read();
      if (v === undefined) {
        if (params[i].required) throw new Error(`${params[i].name} is required`);
        missing = true;
        continue;
      }
      if (missing) throw new Error(`${params[i].name} is set but an earlier optional argument is not`);
      values.push(v);
    }
    return query ? values : values[0];
  };
  const useRaw = h("input", { type: "checkbox", name: "raw-json" });
  const generated = h("div", { class: "generated" }, fields.map((f) => f.element));
  const toggle = labelled("Edit as raw JSON", useRaw);
  toggle.classList.add("end");
  rawField.hidden = true;
  useRaw.addEventListener("change", () => {
    if (useRaw.checked) {
      try {
        raw.value = pretty(readFields()) || "";
      } catch {
        raw.value = "";
      }
    } else {
      try {
        const value = parseJson(raw.value, rawLabel);
        if (query) fields.forEach((f, i) => f.write(Array.isArray(value) ? value[i] : undefined));
        else if (fields[0]) fields[0].write(value);
      } catch (error) {
        notify(error.message, "error");
      }
    }
    generated.hidden = useRaw.checked;
    rawField.hidden = !useRaw.checked;
  });
  return {
    element: h("div", {}, generated, toggle, rawField),
    read: () => (useRaw.checked ? parseJson(raw.value, rawLabel) : readFields()),
  };
}

function messageForm(id, kind, scopes, reply, known) {
  const out = h("pre", { class: "mono reply", "aria-live": "polite" });
  const slot = h("div", { class: "value" });
  let editor = null;
  const byName = new Map(known.map((k) => [k.name, k]));
  const show = (name) => {
    editor = valueEditor(kind, byName.get(name) || null);
    clear(slot, editor.element);
  };
  const choice = nameChoice(kind, known, (name) => show(name));
  show(known.length ? known[0].name : "");
  const form = h(
    "form",
    { class: "message", id: `${kind}-form`, "aria-label": `Send a ${kind}` },
    choice.element,
    slot,
    action(`Send ${kind}`, scopes, async () => {
      const name = choice.value();
      if (!name) throw new Error(`Give the ${kind} a name`);
      const value = editor.read();
      const body = kind === "query" ? { args: value ?? [] } : value === undefined ? {} : { payload: value };
      const answer = await post(`/workflows/${enc(id)}/${kind}/${enc(name)}`, body);
      if (reply) out.textContent = pretty(answer.result);
      notify(`${kind} ${name} sent`);
    }),
    out,
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  return form;
}

const KINDS = [
  ["signal", "signals", ["signals:write"], false],
  ["update", "updates", ["updates:write"], true],
  ["query", "queries", ["queries:read"], true],
];

// The three forms, redrawn when what the run takes changes, except one the user has
// started filling in: it keeps what was typed.
export function messageForms(id) {
  const element = h("div", { id: "message-forms" });
  const shown = new Map();
  function update(handlers, live) {
    if (!live) {
      clear(element);
      shown.clear();
      return;
    }
    for (const [kind, field, scopes, reply] of KINDS) {
      const known = handlers[field] || [];
      const key = JSON.stringify(known);
      const current = shown.get(kind);
      if (current && (current.key === key || current.form.dataset.dirty)) continue;
      const form = messageForm(id, kind, scopes, reply, known);
      const touched = () => (form.dataset.dirty = "1");
      form.addEventListener("input", touched);
      form.addEventListener("change", touched);
      if (current) current.form.replaceWith(form);
      else element.append(form);
      shown.set(kind, { form, key });
    }
  }
  return { element, update };
}
