// The reply box under an open conversation: Enter sends, Shift+Enter breaks the line (and
// Enter that ends a word being composed by an input method, as Vietnamese Telex typing does,
// only ends the word); a message's Reply action puts its quote above the box, with a cancel.
import { h } from './dom.js';

let composers = 0;

export class Composer {
  /** `onSend({content, quote})` queues the reply; quote is {msg_id, text} or null. */
  constructor(title, onSend) {
    this.onSend = onSend;
    this.quoted = null;
    const id = `reply-text-${(composers += 1)}`;
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
      onkeydown: (e) => this.key(e),
    });
    this.button = h('button', { type: 'submit', class: 'reply-send' }, 'Send');
    this.el = h('form', { class: 'reply-composer', 'aria-label': 'Reply', onsubmit: (e) => { e.preventDefault(); this.submit(); } },
      this.quoteBox,
      h('label', { for: id, class: 'visually-hidden' }, `Reply to ${title}`),
      h('span', { id: `${id}-hint`, class: 'visually-hidden' }, 'Enter sends the reply, Shift+Enter starts a new line.'),
      h('div', { class: 'reply-row' }, this.text, this.button));
  }

  key(e) {
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
