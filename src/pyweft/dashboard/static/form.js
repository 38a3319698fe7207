// Inputs generated from a JSON Schema: numbers, strings, booleans and enums get native
// controls; anything else (objects, arrays, unions, untyped) a JSON text area.
import { h, jsonInput, labelled, parseJson } from "./dom.js";
import { resolve } from "./schema-fields.js";

// An example value for a schema, shown as a JSON box's placeholder.
function example(schema, defs, depth = 0) {
  schema = resolve(schema, defs);
  if (schema.default !== undefined) return schema.default;
  if (schema.enum) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (type === "object" && schema.properties && depth < 3) {
    return Object.fromEntries(Object.entries(schema.properties).map(([k, v]) => [k, example(v, defs, depth + 1)]));
  }
  return { string: "", integer: 0, number: 0, boolean: false, array: [], object: {} }[type] ?? null;
}

export function schemaField(param, defs) {
  const schema = resolve(param.schema, defs);
  const type = Array.isArray(schema.type) ? null : schema.type;
  const hint = param.required ? "required" : "optional, default " + JSON.stringify(param.default);
  const label = `${param.name}${schema.title && schema.title !== param.name ? " — " + schema.title : ""}`;
  let control;
  let read;
  if (schema.enum) {
    control = h("select", { name: param.name }, schema.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    read = () => JSON.parse(control.value);
  } else if (type === "integer" || type === "number") {
    control = h("input", { type: "number", name: param.name, step: type === "integer" ? "1" : "any", required: param.required, value: param.default ?? "" });
    read = () => (control.value === "" ? undefined : Number(control.value));
  } else if (type === "string") {
    control = h("input", { type: "text", name: param.name, required: param.required, value: param.default ?? "", autocomplete: "off" });
    read = () => control.value;
  } else if (type === "boolean") {
    control = h("input", { type: "checkbox", name: param.name, checked: param.default === true });
    read = () => control.checked;
  } else {
    const sample = JSON.stringify(param.default ?? (type === "object" ? {} : type === "array" ? [] : null), null, 1);
    control = jsonInput(param.name, param.required ? "" : sample, 4);
    control.placeholder = "e.g. " + JSON.stringify(example(param.schema, defs));
    read = () => parseJson(control.value, param.name);
  }
  const kind = schema.type ? JSON.stringify(schema.type) : "any JSON";
  return { element: labelled(label, control, `${kind}, ${hint}`), read, param };
}

export function readArgs(fields) {
  const args = [];
  let missing = false;
  for (const f of fields) {
    const value = f.read();
    if (value === undefined) {
      if (f.param.required) throw new Error(`${f.param.name} is required`);
      missing = true;
      continue;
    }
    if (missing) throw new Error(`${f.param.name} is set but an earlier optional argument is not; fill that in too`);
    args.push(value);
  }
  return args;
}
