// Inputs generated from a JSON Schema, nested: strings, numbers, integers, booleans and
// enums get native controls, objects a fieldset of their properties, arrays a list of
// items with add and remove; anything else (unions, untyped) a JSON text area. Each
// input has read() (its value, undefined when left empty) and write(value).
import { h, jsonInput, labelled, parseJson, pretty } from "./dom.js";

const MAX_DEPTH = 4;

export function resolve(schema, defs) {
  for (let i = 0; schema && schema.$ref && i < 8; i++) {
    const name = schema.$ref.split("/").pop();
    schema = { ...((defs && defs[name]) || {}), ...Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "$ref")) };
  }
  return schema || {};
}

// Optional[T] is {"anyOf": [T, {"type": "null"}]}: the field is T, and may be left empty.
function unwrapNullable(schema, defs) {
  const options = schema.anyOf || schema.oneOf;
  if (!Array.isArray(options)) return { schema, nullable: false };
  const rest = options.filter((o) => resolve(o, defs).type !== "null");
  if (rest.length === 1 && rest.length < options.length) return { schema: { ...resolve(rest[0], defs), title: schema.title, default: schema.default }, nullable: true };
  return { schema, nullable: false };
}

function typeOf(schema) {
  if (Array.isArray(schema.type)) {
    const real = schema.type.filter((t) => t !== "null");
    return real.length === 1 ? real[0] : null;
  }
  return schema.type || null;
}

function hintOf(schema, required, fallback) {
  const type = schema.enum ? "one of " + schema.enum.map((v) => JSON.stringify(v)).join(", ") : typeOf(schema) || "any JSON";
  const need = required ? "required" : schema.default !== undefined ? "optional, default " + JSON.stringify(schema.default) : "optional";
  return [type, need, fallback].filter(Boolean).join(", ");
}

// One input for `schema`. opts: {label, name, required, value, depth}.
export function schemaInput(rawSchema, defs, opts) {
  const depth = opts.depth || 0;
  const unwrapped = unwrapNullable(resolve(rawSchema, defs), defs);
  const schema = unwrapped.schema;
  const required = !!opts.required && !unwrapped.nullable;
  const type = typeOf(schema);
  const initial = opts.value !== undefined ? opts.value : schema.default;
  const label = opts.label + (schema.title && schema.title !== opts.label ? ` — ${schema.title}` : "");
  const name = opts.name;
  if (schema.enum) {
    const select = h(
      "select",
      { name },
      required ? null : h("option", { value: "" }, "(not set)"),
      schema.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))),
    );
    const write = (v) => (select.value = v === undefined || v === null ? (required ? select.options[0].value : "") : JSON.stringify(v));
    write(initial);
    return { element: labelled(label, select, hintOf(schema, required)), read: () => (select.value === "" ? undefined : JSON.parse(select.value)), write };
  }
  if (type === "integer" || type === "number") {
    const input = h("input", { type: "number", name, step: type === "integer" ? "1" : "any", required, autocomplete: "off" });
    const write = (v) => (input.value = v === undefined || v === null ? "" : String(v));
    write(initial);
    const read = () => {
      if (input.value === "") return undefined;
      const n = Number(input.value);
      if (type === "integer" && !Number.isInteger(n)) throw new Error(`${opts.label} must be a whole number`);
      return n;
    };
    return { element: labelled(label, input, hintOf(schema, required)), read, write };
  }
  if (type === "string") {
    const input = h("input", { type: "text", name, required, autocomplete: "off" });
    const write = (v) => (input.value = v === undefined || v === null ? "" : String(v));
    write(initial);
    // An empty optional string is "not given"; an empty required one is the empty string.
    const read = () => (input.value === "" && !required ? undefined : input.value);
    return { element: labelled(label, input, hintOf(schema, required)), read, write };
  }
  if (type === "boolean") {
    const input = h("input", { type: "checkbox", name });
    const write = (v) => (input.checked = v === true);
    write(initial);
    return { element: labelled(label, input, hintOf(schema, required)), read: () => input.checked, write };
  }
  if (type === "object" && schema.properties && depth < MAX_DEPTH) {
    const needed = new Set(schema.required || []);
    const fields = Object.entries(schema.properties).map(([key, sub]) => [
      key,
      schemaInput(sub, defs, { label: key, name: `${name}.${key}`, required: needed.has(key), depth: depth + 1 }),
    ]);
    const write = (v) => {
      for (const [key, f] of fields) f.write(v && typeof v === "object" ? v[key] : undefined);
    };
    if (initial !== undefined) write(initial);
    const read = () => {
      const out = {};
      let any = false;
      for (const [key, f] of fields) {
        const value = f.read();
        if (value === undefined) {
          if (needed.has(key) && required) throw new Error(`${opts.label}.${key} is required`);
          continue;
        }
        out[key] = value;
        any = true;
      }
      return any || required ? out : undefined;
    };
    const element = h("fieldset", { class: "nested", dataset: { field: name } }, h("legend", {}, label), h("small", { class: "hint" }, hintOf(schema, required)), fields.map(([, f]) => f.element));
    return { element, read, write };
  }
  if (type === "array" && schema.items && depth < MAX_DEPTH) {
    const list = h("ol", { class: "items" });
    const items = [];
    const add = (value) => {
      const n = items.length + 1;
      const field = schemaInput(schema.items, defs, { label: `${opts.label} item ${n}`, name: `${name}[]`, required: true, value, depth: depth + 1 });
      const remove = h("button", { type: "button", class: "link" }, `Remove ${opts.label} item ${n}`);
      const row = h("li", {}, field.element, remove);
      const entry = { field, row };
      remove.addEventListener("click", () => {
        items.splice(items.indexOf(entry), 1);
        row.remove();
      });
      items.push(entry);
      list.append(row);
    };
    const write = (v) => {
      items.splice(0).forEach((e) => e.row.remove());
      for (const item of Array.isArray(v) ? v : []) add(item);
    };
    if (initial !== undefined) write(initial);
    const read = () => {
      const values = items.map((e) => e.field.read()).filter((v) => v !== undefined);
      return values.length || required ? values : undefined;
    };
    const more = h("button", { type: "button", dataset: { add: name } }, `Add ${opts.label} item`);
    more.addEventListener("click", () => add(undefined));
    const element = h("fieldset", { class: "nested", dataset: { field: name } }, h("legend", {}, label), h("small", { class: "hint" }, hintOf(schema, required)), list, more);
    return { element, read, write };
  }
  const box = jsonInput(name, "", 3);
  const write = (v) => (box.value = v === undefined ? "" : pretty(v));
  write(initial);
  return {
    element: labelled(label, box, hintOf(schema, required, "as JSON")),
    read: () => parseJson(box.value, opts.label),
    write,
  };
}
