// The dashboard's only way to the server: the public REST API under /api/v1 and its
// SSE feeds, called with the signed-in API key. Nothing here knows the engine.
const BASE = "/api/v1";
const KEY = "pyweft.apiKey";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

export const session = {
  principal: null, // {subject, method, scopes}
  get key() {
    return sessionStorage.getItem(KEY);
  },
  set key(value) {
    if (value) sessionStorage.setItem(KEY, value);
    else sessionStorage.removeItem(KEY);
  },
  can(...scopes) {
    const p = this.principal;
    return !!p && scopes.some((s) => p.scopes.includes(s));
  },
};

let onUnauthorized = () => {};
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  if (session.key) out.Authorization = "Bearer " + session.key;
  return out;
}

export async function api(method, path, body, { signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(BASE + path, init);
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const err = (data && data.error) || {};
    const error = new ApiError(
      response.status,
      err.code || "HTTPError",
      err.message || response.statusText,
      err.details,
    );
    if (response.status === 401) onUnauthorized(error);
    throw error;
  }
  return data;
}

export const get = (path, opts) => api("GET", path, undefined, opts);

// A route that answers in plain text (the Prometheus exposition at /metrics).
export async function getText(path) {
  const response = await fetch(BASE + path, { headers: headers({ Accept: "text/plain" }) });
  if (response.status === 401) onUnauthorized(new ApiError(401, "AuthenticationError", "sign in again"));
  if (!response.ok) throw new ApiError(response.status, "HTTPError", response.statusText);
  return response.text();
}
export const post = (path, body, opts) => api("POST", path, body ?? {}, opts);

export function qs(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === "") continue;
    for (const v of Array.isArray(value) ? value : [value]) search.append(name, v);
  }
  const text = search.toString();
  return text ? "?" + text : "";
}

export const enc = encodeURIComponent;

export async function loadPrincipal() {
  // Public route: tells whether the server is open, and who the key belongs to.
  session.principal = await get("/principal");
  return session.principal;
}

// Server-sent events over fetch (EventSource cannot send an Authorization header).
// Reconnects with Last-Event-ID so no event is lost or repeated across a drop.
export function follow(path, onEvent, { onGap, onState } = {}) {
  const controller = new AbortController();
  let cursor = null;
  let stopped = false;
  async function run() {
    while (!stopped) {
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (cursor) h["Last-Event-ID"] = cursor;
        const response = await fetch(BASE + path, { headers: h, signal: controller.signal });
        if (response.status === 401) {
          onUnauthorized(new ApiError(401, "AuthenticationError", "sign in again"));
          return;
        }
        if (!response.ok || !response.body) throw new Error("feed " + response.status);
        onState && onState("live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const message = { event: "message", id: null, data: "" };
            for (const line of block.split("\n")) {
              if (line.startsWith(":")) continue;
              const at = line.indexOf(":");
              const field = at < 0 ? line : line.slice(0, at);
              const val = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
              if (field === "event") message.event = val;
              else if (field === "id") message.id = val;
              else if (field === "data") message.data += val;
            }
            if (message.id) cursor = message.id;
            if (!message.data) continue;
            const data = JSON.parse(message.data);
            if (message.event === "gap") onGap && onGap(data);
            else onEvent(data, message.event);
          }
        }
        if (path.includes("/workflows/")) return; // a run's feed ends with the run
      } catch (error) {
        if (stopped || error.name === "AbortError") return;
      }
      onState && onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
