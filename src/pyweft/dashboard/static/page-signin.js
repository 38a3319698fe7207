// Sign in with an API key (kept in this tab's sessionStorage only).
import { loadPrincipal, session } from "./api.js";
import { clear, h, labelled } from "./dom.js";

export async function signinPage({ main, params }, done) {
  const key = h("input", { type: "password", name: "key", id: "api-key", required: true, autocomplete: "off", spellcheck: "false" });
  const problem = h("p", { class: "error", role: "alert", id: "signin-error" });
  const form = h(
    "form",
    { class: "card signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("p", {}, "Paste an API key made with ", h("code", {}, "pyweft keys create"), ". It stays in this browser tab."),
    labelled("API key", key),
    h("button", { type: "submit", id: "signin-submit" }, "Sign in"),
    problem,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.textContent = "";
    session.key = key.value.trim();
    const who = await loadPrincipal();
    if (who.method === "unauthenticated") {
      session.key = null;
      problem.textContent = "That key was not accepted (unknown, expired or revoked).";
      key.focus();
      return;
    }
    await done(params.get("next"));
  });
  clear(main, form);
  key.focus();
}
