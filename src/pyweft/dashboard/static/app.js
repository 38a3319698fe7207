// The shell: sign-in, navigation and a hash router (#/runs?status=failed ...), so every
// page, filter and cursor lives in the URL and survives a reload or a shared link.
import { loadPrincipal, session, whenUnauthorized } from "./api.js";
import { clear, h, notify } from "./dom.js";
import { overviewPage } from "./page-overview.js";
import { queuesPage, workersPage } from "./page-queues.js";
import { reviewsPage } from "./page-reviews.js";
import { runPage } from "./page-run.js";
import { runsPage } from "./page-runs.js";
import { scheduleDetailPage, schedulesPage } from "./page-schedules.js";
import { signinPage } from "./page-signin.js";
import { startPage } from "./page-start.js";
import { systemPage } from "./page-system.js";

const PAGES = [
  ["overview", "Overview"],
  ["runs", "Runs"],
  ["start", "Start"],
  ["reviews", "Reviews"],
  ["schedules", "Schedules"],
  ["queues", "Queues"],
  ["workers", "Workers"],
  ["system", "System"],
];

let cleanup = null; // the current page's teardown (closes its live feeds)
let generation = 0; // a page still loading when the user moves on must not draw over the next

export function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

export function navigate(path, params) {
  const text = params && params.toString();
  location.hash = "#/" + path + (text ? "?" + text : "");
}

function renderNav(current) {
  const nav = document.getElementById("nav");
  clear(
    nav,
    h(
      "ul",
      {},
      PAGES.map(([name, label]) =>
        h(
          "li",
          {},
          h(
            "a",
            { href: "#/" + name, "aria-current": current === name ? "page" : undefined },
            label,
          ),
        ),
      ),
    ),
  );
  const who = document.getElementById("who");
  const p = session.principal;
  if (!p || p.method === "unauthenticated") return clear(who);
  clear(
    who,
    h("span", { title: p.scopes.join(", ") }, p.method === "open" ? "open server" : p.subject),
    p.method === "open"
      ? null
      : h(
          "button",
          {
            type: "button",
            class: "link",
            onclick: () => {
              session.key = null;
              session.principal = null;
              navigate("signin");
            },
          },
          "Sign out",
        ),
  );
}

async function render() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const { parts, params } = route();
  const main = document.getElementById("main");
  const signedIn = session.principal && session.principal.method !== "unauthenticated";
  let page = parts[0] || "overview";
  if (!signedIn && page !== "signin") {
    navigate("signin", new URLSearchParams({ next: location.hash.slice(1) || "/overview" }));
    return;
  }
  renderNav(page);
  // Each render draws into its own container: one left behind is detached, so a slow
  // page finishing late changes nothing on screen, and its live feeds are closed.
  const mine = ++generation;
  const view = h("div", { class: "view" }, h("p", { class: "muted" }, "Loading…"));
  clear(main, view);
  const onLeave = (fn) => {
    if (mine === generation) cleanup = fn;
    else fn();
  };
  const ctx = { main: view, parts, params, onLeave, refresh: render };
  try {
    if (page === "signin") await signinPage(ctx, afterSignIn);
    else if (page === "overview") await overviewPage(ctx);
    else if (page === "runs" && parts[1]) await runPage(ctx, parts.slice(1).join("/"));
    else if (page === "runs") await runsPage(ctx);
    else if (page === "start") await startPage(ctx);
    else if (page === "reviews") await reviewsPage(ctx);
    else if (page === "schedules" && parts[1]) await scheduleDetailPage(ctx, parts.slice(1).join("/"));
    else if (page === "schedules") await schedulesPage(ctx);
    else if (page === "queues") await queuesPage(ctx);
    else if (page === "workers") await workersPage(ctx);
    else if (page === "system") await systemPage(ctx);
    else clear(main, h("h1", {}, "Not found"), h("p", {}, "No page at " + location.hash));
    if (mine !== generation) return;
    const title = view.querySelector("h1");
    document.title = (title ? title.textContent + " · " : "") + "pyweft";
  } catch (error) {
    if (error.status === 401 || mine !== generation) return;
    clear(view, h("h1", {}, "Something went wrong"), h("p", { role: "alert" }, error.message));
  }
}

async function afterSignIn(next) {
  await loadPrincipal();
  location.hash = "#" + (next || "/overview");
}

whenUnauthorized(() => {
  if (route().parts[0] === "signin") return;
  session.key = null;
  session.principal = { subject: "anonymous", method: "unauthenticated", scopes: [] };
  notify("Please sign in with an API key.", "error");
  navigate("signin", new URLSearchParams({ next: location.hash.slice(1) }));
});

window.addEventListener("hashchange", render);
// A page left for another document may be kept whole in the back/forward cache, its
// live feeds still open. Each holds one of the few connections the browser allows per
// host (six over HTTP/1.1), so a handful of left pages stalled every request of the
// next ones until the cache let go. Leaving closes them, as moving to another page of
// the dashboard does (a page still loading closes its own once it has opened them);
// coming back from the cache draws the page again, with new feeds.
window.addEventListener("pagehide", () => {
  generation++;
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
});
window.addEventListener("pageshow", (event) => {
  if (event.persisted) render();
});
window.addEventListener("DOMContentLoaded", async () => {
  try {
    await loadPrincipal();
  } catch (error) {
    notify("The server did not answer: " + error.message, "error");
  }
  render();
});
