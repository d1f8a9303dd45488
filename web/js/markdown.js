// Forum bodies are Markdown. marked turns the text into HTML; DOMPurify then keeps only the
// harmless part of it (the tags and attributes below, no script, no event handler, no
// javascript: link), and the page receives nodes, never an HTML string. Both are vendored and
// pinned in web/vendor (update.sh), like the API documentation's assets.
import { Marked } from '../vendor/marked-18.3.0/marked.esm.js';
import DOMPurify from '../vendor/dompurify-3.5.0/purify.es.mjs';

const markdown = new Marked({ gfm: true, breaks: true, async: false });

const ALLOWED_TAGS = [
  'p', 'br', 'strong', 'em', 'del', 'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'a', 'hr',
  'h3', 'h4', 'h5', 'h6', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
];
const ALLOWED_ATTR = ['href', 'title'];

// A link leaves the page in a new tab and tells the other site nothing.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow ugc');
  }
});

/** `text` (Markdown) as sanitized nodes. Headings are demoted below the page's own. */
export function renderMarkdown(text) {
  const html = markdown.parse(text).replace(/<(\/?)h[12]>/g, '<$1h3>');
  return DOMPurify.sanitize(html, { ALLOWED_TAGS, ALLOWED_ATTR, RETURN_DOM_FRAGMENT: true });
}
