// Reviews inbox: pending reviews with countdowns and their artifacts; approve, reject or
// ask for changes with a comment. The archive shows decided ones.
import { enc, follow, get, post, qs, session } from "./api.js";
import { action, badge, clear, fmtRelative, fmtTime, h, labelled, notify, pretty, runLink } from "./dom.js";

function card(review, reload) {
  const comment = h("textarea", { name: "feedback", rows: 2 });
  const decide = (decision, label, danger) =>
    action(label, ["reviews:write"], async () => {
      const body = { decision };
      if (comment.value.trim()) body.feedback = comment.value.trim();
      await post(`/reviews/${enc(review.review_id)}/decision`, body);
      notify(`${review.review_type}: ${decision}`);
      reload();
    }, { danger, id: `${decision}-${review.review_id}` });
  const pending = review.status === "pending";
  return h(
    "article",
    { class: "card review", dataset: { review: review.review_id }, "aria-label": `${review.review_type} for ${review.workflow_id}` },
    h("h2", {}, review.review_type, " ", badge(review.status)),
    h("p", {}, "Run ", runLink(review.workflow_id), ` (${review.workflow_type}) · asked ${fmtRelative(review.created_at)}`,
      review.deadline ? h("span", { class: "countdown", dataset: { deadline: review.deadline } }, ` · due ${fmtRelative(review.deadline)}`) : null),
    review.reviewers && review.reviewers.length ? h("p", { class: "muted" }, "Reviewers: " + review.reviewers.join(", ")) : null,
    h("pre", { class: "mono artifact" }, pretty(review.artifact)),
    pending
      ? h("div", {}, labelled("Comment", comment), h("div", { class: "row" }, decide("approved", "Approve"), decide("needs_changes", "Request changes"), decide("rejected", "Reject", true)))
      : h("p", { class: "muted" }, `${review.status} by ${review.reviewer || "?"} ${fmtTime(review.decided_at)}`, review.feedback ? ` — “${review.feedback}”` : ""),
  );
}

export async function reviewsPage({ main, params, onLeave }) {
  const archive = params.get("view") === "archive";
  const list = h("div", { class: "reviews", id: "reviews" });
  async function load() {
    const { items } = await get("/reviews" + qs({ status: archive ? "all" : "pending" }));
    const shown = archive ? items.filter((r) => r.status !== "pending") : items;
    clear(list, shown.length ? shown.map((r) => card(r, load)) : h("p", { class: "muted" }, archive ? "Nothing decided yet." : "Inbox zero: no review is waiting."));
  }
  if (!session.can("reviews:read")) {
    clear(main, h("h1", {}, "Reviews"), h("p", { class: "muted" }, "Your key lacks the scope: needs reviews:read."));
    return;
  }
  await load();
  clear(
    main,
    h("h1", {}, archive ? "Reviews — archive" : "Reviews inbox"),
    h("nav", { class: "tabs", "aria-label": "Review views" },
      h("a", { href: "#/reviews", "aria-current": archive ? undefined : "page" }, "Pending"),
      h("a", { href: "#/reviews?view=archive", "aria-current": archive ? "page" : undefined }, "Archive")),
    list,
  );
  const tick = setInterval(() => {
    for (const el of list.querySelectorAll(".countdown")) el.textContent = ` · due ${fmtRelative(el.dataset.deadline)}`;
  }, 1000);
  let stop = () => {};
  if (session.can("events:read")) {
    stop = follow("/events/sse" + qs({ kind: ["review_requested", "review_decided"] }), () => load());
  }
  onLeave(() => {
    clearInterval(tick);
    stop();
  });
}
