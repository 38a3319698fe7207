// A small in-page check of the accessibility rules axe-core rates serious or critical
// that apply to this app (axe-core is not vendored: docs/decisions/0030-dashboard.md).
// Returns a list of "rule: element" strings; empty means no violation found.
return (function () {
  const out = [];
  const describe = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "");
  const visible = (el) => {
    const s = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    return s.visibility !== "hidden" && s.display !== "none" && r.width > 0 && r.height > 0;
  };
  const name = (el) => {
    if (el.getAttribute("aria-label")) return el.getAttribute("aria-label").trim();
    const by = el.getAttribute("aria-labelledby");
    if (by) return by.split(" ").map((id) => (document.getElementById(id) || {}).textContent || "").join(" ").trim();
    if (el.labels && el.labels.length) return Array.from(el.labels).map((l) => l.textContent).join(" ").trim();
    if (el.getAttribute("title")) return el.getAttribute("title").trim();
    return (el.textContent || el.getAttribute("alt") || "").trim();
  };
  if (!document.documentElement.lang) out.push("html-has-lang: html");
  if (!document.title.trim()) out.push("document-title: head");
  for (const img of document.querySelectorAll("img")) if (!img.hasAttribute("alt")) out.push("image-alt: " + describe(img));
  for (const svg of document.querySelectorAll('svg[role="img"]')) if (!name(svg)) out.push("svg-img-alt: " + describe(svg));
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) if (!name(el)) out.push("label: " + describe(el));
  for (const el of document.querySelectorAll("button, [role=button]")) if (!name(el)) out.push("button-name: " + describe(el));
  for (const el of document.querySelectorAll("a[href]")) if (!name(el)) out.push("link-name: " + describe(el));
  const ids = new Map();
  for (const el of document.querySelectorAll("[id]")) ids.set(el.id, (ids.get(el.id) || 0) + 1);
  for (const [id, n] of ids) if (n > 1) out.push("duplicate-id-active: #" + id);
  for (const el of document.querySelectorAll("[aria-labelledby]"))
    for (const id of el.getAttribute("aria-labelledby").split(" ")) if (!document.getElementById(id)) out.push("aria-valid-attr-value: " + describe(el));
  // color-contrast: text against the first opaque background behind it (WCAG AA).
  const rgb = (text) => (text.match(/[\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      const c = rgb(getComputedStyle(node).backgroundColor);
      if (c.length >= 3 && (c.length === 3 || c[3] > 0.9)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (!el || seen.has(el) || !walker.currentNode.textContent.trim() || !visible(el)) continue;
    seen.add(el);
    if (el.closest("[disabled]")) continue; // disabled controls are exempt
    const s = getComputedStyle(el);
    const fg = rgb(s.color);
    const opacity = Number(s.opacity);
    if (fg.length < 3 || opacity < 1) continue;
    const [a, b] = [lum(fg.slice(0, 3)), lum(background(el))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const size = parseFloat(s.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(s.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) out.push(`color-contrast ${ratio.toFixed(2)}: ${describe(el)} "${walker.currentNode.textContent.trim().slice(0, 30)}"`);
  }
  return out;
})();
