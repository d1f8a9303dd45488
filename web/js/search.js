// Full-text search (GET …/search): a search box, its results with the matched words marked,
// "More results" on next_cursor. Vietnamese is found with or without its marks ("xit chong
// nang" finds "xịt chống nắng"). Snippets are built from text nodes and <mark> elements: the
// API's text is never parsed as HTML.
import { api, explain } from './api.js';
import { h, fill } from './dom.js';
import { go } from './router.js';

const RESULTS_PER_PAGE = 20;
// How long a result opened in context stays highlighted.
export const FOUND_MS = 2500;

/** A match's snippet: its fragments in order, the highlighted ones as <mark>, with "…" where
 * the snippet is cut from a longer text. */
export function snippetEl(match) {
  return h('span', { class: 'snippet' },
    match.cut_before ? '…' : null,
    match.fragments.map((f) => (f.highlighted ? h('mark', {}, f.text) : document.createTextNode(f.text))),
    match.cut_after ? '…' : null);
}

/**
 * A search box and its results. `path`: the route; `label`: what is searched ("Search messages");
 * `scope()`: more query parameters for each search (read when it starts); `options`: elements
 * shown in the form after the button (a "this conversation only" checkbox); `item(hit)`: one
 * result's link content and href, `{ href, children }`.
 */
export class SearchBox {
  constructor({ id, path, label, placeholder, scope = () => ({}), options = [], item, what }) {
    Object.assign(this, { path, scope, item, what });
    this.asked = null; // { q, ...scope } of the results shown
    this.cursor = null;
    this.run = 0;
    this.input = h('input', {
      type: 'search', id: `${id}-q`, name: 'q', maxlength: '200', autocomplete: 'off',
      enterkeyhint: 'search', placeholder, class: 'search-input',
    });
    this.status = h('p', { class: 'muted search-status', role: 'status', 'aria-live': 'polite' });
    this.list = h('ol', { class: 'search-results', 'aria-label': `Results of ${label.toLowerCase()}`, hidden: true });
    this.more = h('div', { class: 'list-more search-more' });
    this.clearButton = h('button', { type: 'button', class: 'ghost small search-clear', hidden: true, onclick: () => this.clear(true) }, 'Clear');
    this.form = h('form', {
      class: 'search-form', role: 'search', 'aria-label': label,
      onsubmit: (event) => {
        event.preventDefault();
        this.search();
      },
    },
    h('label', { for: this.input.id, class: 'visually-hidden' }, label),
    h('div', { class: 'search-row' }, this.input, h('button', { type: 'submit' }, 'Search')),
    h('div', { class: 'search-options' }, options, this.clearButton));
    // Escape in the box clears the search (and the box).
    this.input.addEventListener('keydown', (event) => {
      if (event.key === 'Escape' && (this.input.value || this.asked)) {
        event.preventDefault();
        this.input.value = '';
        this.clear(false);
      }
    });
    this.el = h('div', { class: 'search' }, this.form, this.status, this.list, this.more);
  }

  /** A new search of what the box holds. */
  async search() {
    const q = this.input.value.trim();
    if (!q) {
      this.clear(false);
      this.status.textContent = 'Type the words to search for.';
      return;
    }
    this.asked = { q, ...this.scope() };
    this.cursor = null;
    this.list.replaceChildren();
    this.list.hidden = true;
    fill(this.more);
    this.clearButton.hidden = false;
    await this.page();
  }

  /** The next page of the current search (the first when no cursor). */
  async page() {
    const run = (this.run += 1);
    const first = this.cursor == null;
    this.status.textContent = first ? 'Searching…' : 'Loading more results…';
    let reply;
    try {
      reply = await api(this.path, { query: { ...this.asked, limit: RESULTS_PER_PAGE, cursor: this.cursor } });
    } catch (error) {
      if (run !== this.run) return;
      this.status.textContent = explain(error, this.what);
      this.status.classList.add('error');
      return;
    }
    if (run !== this.run) return; // a newer search started meanwhile
    this.status.classList.remove('error');
    for (const hit of reply.hits) {
      const { href, children } = this.item(hit);
      this.list.append(h('li', { class: 'search-result' }, h('a', {
        href,
        class: 'search-hit',
        // The result already open: open it again (the hash would not change).
        onclick: (event) => {
          if (location.hash !== href) return;
          event.preventDefault();
          go(href);
        },
      }, children)));
    }
    this.list.hidden = this.list.children.length === 0;
    const count = this.list.children.length;
    this.status.textContent = count
      ? `${count}${reply.next_cursor ? '+' : ''} ${count === 1 && !reply.next_cursor ? 'result' : 'results'} for “${this.asked.q}”`
      : `Nothing found for “${this.asked.q}”.`;
    this.cursor = reply.next_cursor;
    fill(this.more, this.cursor ? h('button', {
      type: 'button', class: 'ghost wide', onclick: (event) => {
        event.currentTarget.disabled = true;
        this.page();
      },
    }, 'More results') : null);
  }

  /** Results away; `focus`: back to the box (the Clear button disappears under the keyboard). */
  clear(focus) {
    this.run += 1;
    this.asked = null;
    this.cursor = null;
    this.list.replaceChildren();
    this.list.hidden = true;
    fill(this.more);
    this.status.textContent = '';
    this.status.classList.remove('error');
    this.clearButton.hidden = true;
    if (focus) this.input.focus();
  }
}

/** Bring `el` (a message, a comment opened from a search result) into view, highlighted for a
 * moment, with the keyboard's focus so a screen reader reads it. */
export function showFound(el) {
  el.setAttribute('tabindex', '-1');
  el.scrollIntoView({ block: 'center' });
  el.focus({ preventScroll: true });
  el.classList.add('found');
  el.dataset.found = 'true';
  setTimeout(() => el.classList.remove('found'), FOUND_MS);
}
