// The Zalo inbox: an account of the token, its conversations (newest activity first, unread
// counts), one conversation's timeline (older pages load as you scroll up), mark read.
import { api, explain } from './api.js';
import { fill, h, timeEl, when } from './dom.js';
import { go } from './router.js';
import { session } from './session.js';
import { busyButton, errorPanel, notify } from './ui.js';

const MESSAGES_PER_PAGE = 30;
const CONVERSATIONS_PER_PAGE = 20;
// Load the next older page once the reader is this close (px) to the top of the timeline.
const NEAR_TOP = 120;

let view = null; // {account, root, list, thread, items: Map(key -> {conversation, badge})}

export async function inboxView(main, [accountPart, key]) {
  const accounts = session.accounts;
  if (!accounts.length) {
    fill(main, h('div', { class: 'empty card' },
      h('h1', {}, 'Zalo inbox'),
      h('p', {}, 'Your token grants no Zalo account. Sign in with a token whose "accounts" claim lists one (e.g. make token SUB=7 ACCOUNTS=1,2), or open the course forum.')));
    view = null;
    return;
  }
  const account = accountPart ? Number(accountPart) : accounts[0];
  if (!view || view.account !== account || !view.root.isConnected) {
    view = buildInbox(main, accounts, account);
    await loadConversations(view);
  }
  for (const [itemKey, item] of view.items) {
    if (itemKey === key) item.link.setAttribute('aria-current', 'true');
    else item.link.removeAttribute('aria-current');
  }
  if (key) await openConversation(view, key);
  else fill(view.thread, h('p', { class: 'muted center' }, 'Pick a conversation.'));
}

function buildInbox(main, accounts, account) {
  const picker = h('select', { id: 'account', onchange: (e) => go(`#/inbox/${e.target.value}`) },
    accounts.map((a) => h('option', { value: String(a), selected: a === account }, `Zalo account ${a}`)));
  const list = h('ol', { class: 'conversations', 'aria-label': 'Conversations' });
  const more = h('div', { class: 'list-more' });
  const thread = h('section', { class: 'thread', 'aria-label': 'Conversation' });
  const root = h('div', { class: 'inbox' },
    h('aside', { class: 'sidebar' },
      h('div', { class: 'sidebar-head' },
        h('label', { for: 'account' }, 'Account'), picker,
        busyButton('↻', () => loadConversations(view), { class: 'ghost', title: 'Reload the conversations', 'aria-label': 'Reload the conversations' })),
      list, more),
    thread);
  fill(main, root);
  return { account, root, list, more, thread, items: new Map(), cursor: null };
}

async function loadConversations(v, older = false) {
  if (!older) {
    v.items.clear();
    v.cursor = null;
    fill(v.list, h('li', { class: 'muted' }, 'Loading conversations…'));
  }
  let page;
  try {
    page = await api(`api/zalo-accounts/${v.account}/conversations`, {
      query: { limit: CONVERSATIONS_PER_PAGE, ...(v.cursor ?? {}) },
    });
  } catch (error) {
    fill(v.list, h('li', {}, errorPanel(error, `Zalo account ${v.account}`)));
    fill(v.more);
    return;
  }
  if (!older) v.list.replaceChildren();
  for (const conversation of page.data) {
    if (v.items.has(conversation.thread_id)) continue;
    v.list.append(conversationItem(v, conversation));
  }
  if (!v.items.size) fill(v.list, h('li', { class: 'muted' }, 'No conversation yet.'));
  const p = page.pagination;
  v.cursor = p.has_more
    ? { before_last_message_at: p.next_before_last_message_at, before_id: p.next_before_id }
    : null;
  fill(v.more, p.has_more ? busyButton('Older conversations', () => loadConversations(v, true), { class: 'ghost wide' }) : null);
}

function conversationItem(v, conversation) {
  const badge = h('span', { class: 'unread' });
  const link = h('a', {
    class: 'conversation',
    href: `#/inbox/${v.account}/${encodeURIComponent(conversation.thread_id)}`,
    dataset: { key: conversation.thread_id },
  },
  h('span', { class: 'conversation-title' }, conversation.thread_type === 'group' ? '👥 ' : '👤 ', conversation.thread_id),
  badge,
  h('span', { class: 'conversation-time muted' }, timeEl(conversation.last_message_at)));
  const item = { conversation, badge, link };
  v.items.set(conversation.thread_id, item);
  setUnread(item, conversation.unread_count);
  return h('li', {}, link);
}

function setUnread(item, count, pending = false) {
  item.conversation.unread_count = count;
  item.badge.textContent = String(count);
  item.badge.dataset.count = String(count);
  item.badge.hidden = count === 0;
  item.badge.classList.toggle('pending', pending);
  item.badge.setAttribute('aria-label', `${count} unread`);
  if (item.header) {
    item.header.textContent = count ? `${count} unread` : 'All read';
    item.header.dataset.count = String(count);
  }
}

async function openConversation(v, key) {
  const item = v.items.get(key) ?? {
    conversation: { thread_id: key, unread_count: 0 },
    badge: h('span'),
    link: h('a'),
  };
  const unread = h('span', { class: 'thread-unread muted', dataset: { count: '' } }, '');
  item.header = unread;
  setUnread(item, item.conversation.unread_count);
  const start = h('div', { class: 'timeline-start muted', id: 'timeline-start', dataset: { state: 'more' } }, 'Scroll up for older messages');
  const messages = h('ol', { class: 'messages' });
  const scroller = h('div', { class: 'timeline', tabindex: '0', 'aria-label': 'Messages' }, start, messages);
  fill(v.thread,
    h('header', { class: 'thread-head' },
      h('h2', {}, key),
      unread,
      busyButton('Mark read', () => markRead(v, key, item), { class: 'mark-read' })),
    scroller);
  const timeline = new Timeline(v.account, key, scroller, start, messages);
  await timeline.start();
  // The count as the read side has it now (the list may be older than this conversation).
  try {
    const reply = await api(`api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}/unread`);
    setUnread(item, reply.data.unread);
  } catch (error) {
    if (error.status === 404) fill(v.thread, errorPanel(error, `conversation ${key}`));
  }
}

async function markRead(v, key, item) {
  const before = item.conversation.unread_count;
  const base = `api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}`;
  let readAt;
  try {
    readAt = (await api(`${base}/read`, { method: 'POST', body: {} })).data.read_at;
  } catch (error) {
    notify(explain(error, `conversation ${key}`), 'error');
    return;
  }
  // Accepted (202) and applied asynchronously: show it at once, then what the server counts.
  setUnread(item, 0, true);
  const deadline = Date.now() + 15000;
  while (Date.now() < deadline) {
    try {
      const reply = await api(`${base}/unread`);
      const applied = reply.data.last_read_at && new Date(reply.data.last_read_at) >= new Date(readAt);
      if (applied) {
        setUnread(item, reply.data.unread);
        notify(`Marked read up to ${when(readAt)}.`);
        return;
      }
    } catch (error) {
      setUnread(item, before);
      notify(explain(error, `conversation ${key}`), 'error');
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  item.badge.classList.remove('pending');
  notify('Marked read; the server has not applied it yet — the count will follow.');
}

/** One conversation's messages, oldest at the top; each older page is fetched with the cursor
 * the previous page returned (next_before_sent_at, next_before_id): nothing twice, no gap. */
class Timeline {
  constructor(account, key, scroller, marker, list) {
    Object.assign(this, { account, key, scroller, marker, list });
    this.cursor = null;
    this.hasMore = true;
    this.loading = false;
    this.seen = new Set();
    this.duplicates = 0;
    scroller.addEventListener('scroll', () => this.fillUp(), { passive: true });
  }

  async start() {
    await this.load();
    this.scroller.scrollTop = this.scroller.scrollHeight;
    await this.fillUp();
  }

  /** Load older pages while the top is in view (the first pages may not fill the pane). */
  async fillUp() {
    while (this.hasMore && !this.loading && this.scroller.isConnected && this.scroller.scrollTop < NEAR_TOP) {
      if (!(await this.load())) return;
    }
  }

  async load() {
    this.loading = true;
    this.setState('loading', 'Loading older messages…');
    let page;
    try {
      page = await api(`api/zalo-accounts/${this.account}/messages`, {
        query: { conversation_key: this.key, limit: MESSAGES_PER_PAGE, ...(this.cursor ?? {}) },
      });
    } catch (error) {
      this.loading = false;
      this.setState('error', explain(error, `conversation ${this.key}`));
      return false;
    }
    // Newest first from the API; shown oldest first, above what is already there.
    const fresh = [];
    for (const message of page.data) {
      if (this.seen.has(message.id)) {
        this.duplicates += 1;
        continue;
      }
      this.seen.add(message.id);
      fresh.push(message);
    }
    const fromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
    this.list.prepend(...fresh.reverse().map((m) => messageItem(m, this.list)));
    this.scroller.scrollTop = this.scroller.scrollHeight - fromBottom;
    this.scroller.dataset.duplicates = String(this.duplicates);
    this.scroller.dataset.loaded = String(this.seen.size);
    const p = page.pagination;
    this.hasMore = p.has_more;
    this.cursor = p.has_more ? { before_sent_at: p.next_before_sent_at, before_id: p.next_before_id } : null;
    this.loading = false;
    if (this.hasMore) this.setState('more', 'Scroll up for older messages');
    else this.setState('start', this.seen.size ? 'Beginning of the conversation' : 'No messages yet');
    return true;
  }

  setState(state, text) {
    this.marker.dataset.state = state;
    this.marker.textContent = text;
  }
}

function messageItem(m, list) {
  const who = m.sender_name || m.sender_id || (m.direction === 'out' ? 'Account' : 'Customer');
  const attachments = Array.isArray(m.attachments) ? m.attachments.length : m.attachments ? 1 : 0;
  return h('li', { class: `message ${m.direction}`, dataset: { id: m.id, msgId: m.msg_id } },
    h('div', { class: 'message-meta' }, h('span', { class: 'sender' }, who), ' · ', timeEl(m.sent_at)),
    quoteBlock(m, list),
    h('div', { class: 'message-body' }, m.content ?? `[${m.msg_type ?? 'message'} without text]`),
    attachments ? h('div', { class: 'muted' }, `📎 ${attachments} attachment${attachments === 1 ? '' : 's'}`) : null);
}

function quoteBlock(m, list) {
  if (!m.quote_msg_id && m.quote_payload == null && m.quote_preview == null) return null;
  const text = quoteText(m.quote_preview) ?? quoteText(m.quote_payload);
  const quote = h('blockquote', { class: 'quote', dataset: { quoted: m.quote_msg_id ?? '' }, title: 'Show the quoted message' },
    h('span', { class: 'quote-label' }, '↩ '), text ?? `message ${m.quote_msg_id}`);
  quote.addEventListener('click', () => {
    const target = m.quote_msg_id && list.querySelector(`[data-msg-id="${CSS.escape(m.quote_msg_id)}"]`);
    if (target) {
      target.scrollIntoView({ block: 'center' });
      target.classList.add('flash');
      setTimeout(() => target.classList.remove('flash'), 1500);
    } else {
      notify('The quoted message is older than what is loaded: scroll up to load it.');
    }
  });
  return quote;
}

function quoteText(value) {
  if (value == null) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'object') {
    for (const name of ['msg', 'content', 'text', 'message', 'title']) {
      if (typeof value[name] === 'string') return value[name];
    }
  }
  return JSON.stringify(value);
}

