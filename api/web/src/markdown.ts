// Markdown of models, tools and knowledge entries, rendered through
// DOMPurify: no raw HTML, no script, no event handler, no javascript: link.
import { Marked } from "marked";
import DOMPurify from "dompurify";

const md = new Marked({ gfm: true, breaks: false, async: false });

// Raw HTML in the source is shown as text rather than interpreted.
md.use({
  renderer: {
    html({ text }) {
      return escapeHTML(text);
    },
  },
});

const safeURL = /^(https?:|mailto:|#|\/(?!\/))/i;

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") ?? "";
    if (!safeURL.test(href)) node.removeAttribute("href");
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
  if (node.tagName === "IMG") {
    // Only the page's own images: nothing fetched from elsewhere.
    const src = node.getAttribute("src") ?? "";
    if (!/^\/(?!\/)/.test(src)) node.removeAttribute("src");
  }
});

function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** renderMarkdown turns Markdown into sanitized HTML. */
export function renderMarkdown(src: string): string {
  // A test hook: how many times the page rendered Markdown.
  (window as any).__balletMarkdownRenders = ((window as any).__balletMarkdownRenders ?? 0) + 1;
  const html = md.parse(src) as string;
  return DOMPurify.sanitize(html, {
    FORBID_TAGS: ["style", "form", "input", "button", "iframe", "object", "embed", "svg", "math"],
    FORBID_ATTR: ["style", "srcset"],
    ALLOW_DATA_ATTR: false,
  });
}
