// The reply box under an open conversation: Enter sends, Shift+Enter breaks the line (and
// Enter that ends a word being composed by an input method, as Vietnamese Telex typing does,
// only ends the word); a message's Reply action puts its quote above the box, with a cancel.
// A / at the start opens the account's canned replies, filtered as you type: ↑ ↓ choose, Enter
// (or a click) puts the chosen one's text in the box with its placeholders filled, Escape closes.
import { fill, h } from './dom.js';

let composers = 0;
const MAX_SHOWN = 8;

export class Composer {
  /** `onSend({content, quote})` queues the reply; quote is {msg_id, text} or null. `hooks`:
   * typed() on each key, canned() → Promise of the canned replies, fill(body) → its text. */
  constructor(title, onSend, hooks = {}) {
    this.onSend = onSend;
    this.hooks = hooks;
    this.quoted = null;
    this.choices = [];
    this.active = -1;
    const id = `reply-text-${(composers += 1)}`;
    this.listId = `${id}-canned`;
    this.quoteText = h('span', { class: 'reply-quote-text' });
    this.quoteBox = h('div', { class: 'reply-quote', hidden: true },
      h('span', { class: 'quote-label', 'aria-hidden': 'true' }, '↩ '),
      h('span', { class: 'visually-hidden' }, 'Quoting: '),
      this.quoteText,
      h('button', { type: 'button', class: 'ghost reply-quote-cancel', 'aria-label': 'Cancel the quote', title: 'Cancel the quote', onclick: () => this.quote(null) }, '×'));
    this.text = h('textarea', {
      id,
      class: 'reply-text',
      rows: 2,
      placeholder: 'Write a reply… (Enter sends, Shift+Enter: new line)',
      'aria-describedby': `${id}-hint`,
      'aria-autocomplete': 'list',
      'aria-controls': this.listId,
      onkeydown: (e) => this.key(e),
      oninput: () => this.typed(),
      onblur: () => setTimeout(() => this.closeCanned(), 150),
    });
    this.cannedList = h('ul', { id: this.listId, class: 'canned-menu', role: 'listbox', 'aria-label': 'Canned replies', hidden: true });
    this.button = h('button', { type: 'submit', class: 'reply-send' }, 'Send');
    this.el = h('form', { class: 'reply-composer', 'aria-label': 'Reply', onsubmit: (e) => { e.preventDefault(); this.submit(); } },
      this.quoteBox,
      h('label', { for: id, class: 'visually-hidden' }, `Reply to ${title}`),
      h('span', { id: `${id}-hint`, class: 'visually-hidden' }, 'Enter sends the reply, Shift+Enter starts a new line.'),
      this.cannedList,
      h('div', { class: 'reply-row' }, this.text, this.button));
  }

  /** The text changed: the person is typing; a leading / lists the canned replies. */
  async typed() {
    this.hooks.typed?.();
    const value = this.text.value;
    const match = /^\/([^\s]*)$/.exec(value);
    if (!match || !this.hooks.canned) {
      this.closeCanned();
      return;
    }
    const all = await this.hooks.canned();
    if (this.text.value !== value) return; // typed on meanwhile: that input lists
    const query = match[1].toLowerCase();
    const starts = all.filter((c) => c.shortcut.startsWith(query));
    // The text as it reads, not its placeholders' names.
    const text = (c) => c.body.replace(/\{\{[a-z_]+\}\}/g, ' ').toLowerCase();
    const rest = all.filter((c) => !c.shortcut.startsWith(query) && (c.shortcut.includes(query) || text(c).includes(query)));
    this.choices = [...starts, ...rest].slice(0, MAX_SHOWN);
    this.active = this.choices.length ? 0 : -1;
    this.paintCanned(all.length);
  }

  paintCanned(total) {
    const list = this.cannedList;
    if (!this.choices.length) {
      fill(list, h('li', { class: 'muted canned-none', role: 'option', 'aria-disabled': 'true', 'aria-selected': 'false' },
        total ? 'No canned reply matches.' : 'This account has no canned replies yet.'));
    } else {
      fill(list, this.choices.map((c, i) => h('li', {
        id: `${this.listId}-${i}`,
        class: 'canned-option',
        role: 'option',
        'aria-selected': String(i === this.active),
        dataset: { shortcut: c.shortcut },
        onmousedown: (e) => {
          e.preventDefault(); // the box keeps the focus
          this.insertCanned(c);
        },
      }, h('strong', {}, `/${c.shortcut}`), ' ', h('span', { class: 'canned-preview' }, c.body))));
    }
    list.hidden = false;
    if (this.active >= 0) this.text.setAttribute('aria-activedescendant', `${this.listId}-${this.active}`);
    else this.text.removeAttribute('aria-activedescendant');
  }

  closeCanned() {
    this.choices = [];
    this.active = -1;
    this.cannedList.hidden = true;
    this.text.removeAttribute('aria-activedescendant');
  }

  insertCanned(c) {
    this.text.value = this.hooks.fill ? this.hooks.fill(c.body) : c.body;
    this.closeCanned();
    this.text.focus();
    this.text.setSelectionRange(this.text.value.length, this.text.value.length);
  }

  /** ↑ ↓ Enter Tab Escape while the canned replies are listed. */
  cannedKey(e) {
    if (this.cannedList.hidden) return false;
    if (e.key === 'Escape') {
      this.closeCanned();
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      if (!this.choices.length) return true;
      const step = e.key === 'ArrowDown' ? 1 : -1;
      this.active = (this.active + step + this.choices.length) % this.choices.length;
      this.paintCanned(this.choices.length);
    } else if ((e.key === 'Enter' || e.key === 'Tab') && !e.shiftKey && !e.isComposing && this.active >= 0) {
      this.insertCanned(this.choices[this.active]);
    } else if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      this.closeCanned(); // nothing chosen: the text is sent as typed
      return false;
    } else {
      return false;
    }
    e.preventDefault();
    return true;
  }

  key(e) {
    if (this.cannedKey(e)) return;
    if (e.key !== 'Enter' || e.shiftKey || e.isComposing || e.keyCode === 229) return;
    e.preventDefault();
    this.submit();
  }

  submit() {
    const content = this.text.value;
    if (!content.trim()) {
      this.text.focus();
      return;
    }
    this.onSend({ content, quote: this.quoted });
    this.text.value = '';
    this.closeCanned();
    this.quote(null);
    this.text.focus();
  }

  /** Quote `message` ({msg_id, text}) in the next reply; null cancels. */
  quote(message) {
    this.quoted = message;
    this.quoteBox.hidden = message == null;
    this.quoteText.textContent = message ? message.text : '';
    this.text.focus();
  }
}
