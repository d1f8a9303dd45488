// The Zalo inbox: an account of the token, its conversations (newest activity first, unread
// counts), one conversation's timeline (older pages load as you scroll up), mark read; live from
// the account's event stream (conversations reorder, new messages append, reads in other tabs).
import { api, explain } from './api.js';
import { fill, h, plural, timeEl, when } from './dom.js';
import { follow, gate, stopFollowing } from './live.js';
import { go } from './router.js';
import { session } from './session.js';
import { busyButton, errorPanel, notify } from './ui.js';

const MESSAGES_PER_PAGE = 30;
const CONVERSATIONS_PER_PAGE = 20;
// Load the next older page once the reader is this close (px) to the top of the timeline.
const NEAR_TOP = 120;
// A reader this close (px) to the bottom follows new messages; further up, they stay put.
const NEAR_BOTTOM = 40;

// {account, root, list, more, thread, items: Map(key -> {conversation, badge, li, time, title, preview}),
//  cursor, key (the open conversation), header (its unread line), timeline, live (the gate)}
let view = null;

export async function inboxView(main, [accountPart, key]) {
  const accounts = session.accounts;
  if (!accounts.length) {
    stopFollowing();
    fill(main, h('div', { class: 'empty card' },
      h('h1', {}, 'Zalo inbox'),
      h('p', {}, 'Your token grants no Zalo account. Sign in with a token whose "accounts" claim lists one (e.g. make token SUB=7 ACCOUNTS=1,2), or open the course forum.')));
    view = null;
    return;
  }
  const account = accountPart ? Number(accountPart) : accounts[0];
  if (!view || view.account !== account || !view.root.isConnected) {
    const v = (view = buildInbox(main, accounts, account));
    // The stream first, then the lists: whatever commits after the read is in the stream.
    await follow(`api/zalo-accounts/${account}/events`, (kind, data) => v.live.take(kind, data));
    await loadConversations(v);
  }
  view.key = key ?? null;
  for (const [itemKey, item] of view.items) markCurrent(view, itemKey, item);
  if (key) await openConversation(view, key);
  else {
    view.timeline = null;
    view.header = null;
    fill(view.thread, h('p', { class: 'muted center' }, 'Pick a conversation.'));
  }
}

function markCurrent(v, key, item) {
  if (key === v.key) item.link.setAttribute('aria-current', 'true');
  else item.link.removeAttribute('aria-current');
}

function onEvent(v, kind, data) {
  if (kind === 'conversation') placeConversation(v, data);
  else if (kind === 'message' && v.timeline?.key === data.thread_id) v.timeline.arrived(data);
  else if (kind === 'changed') changed(v, data);
  else if (kind === 'reset') refetch(v);
}

/** An object too large for the stream, named: read it, then apply it as its event. */
function changed(v, data) {
  if (data.kind === 'conversation') return refetch(v);
  if (data.kind !== 'message' || v.timeline?.key !== data.conversation_key) return null;
  return v.live.during(async () => {
    try {
      const message = (await api(data.href.replace(/^\//, ''))).data;
      if (v.timeline?.key === message.thread_id) v.timeline.arrived(message);
    } catch (error) {
      if (error.status !== 404) notify(explain(error, 'a new message'), 'error');
    }
  });
}

/** After a reset: the lists again; the open timeline takes what it lacks, in place. */
function refetch(v) {
  return v.live.during(() => Promise.all([loadConversations(v, false, false), v.timeline?.catchUp()]));
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
  const v = { account, root, list, more, thread, items: new Map(), cursor: null, key: null, header: null, timeline: null };
  v.live = gate((kind, data) => onEvent(v, kind, data));
  return v;
}

/** A page of conversations (the first, or the next older one); events wait until it is in. */
function loadConversations(v, older = false, loading = true) {
  return v.live.during(async () => {
    if (!older && loading) fill(v.list, h('li', { class: 'muted' }, 'Loading conversations…'));
    let page;
    try {
      page = await api(`api/zalo-accounts/${v.account}/conversations`, {
        query: { limit: CONVERSATIONS_PER_PAGE, ...(older ? v.cursor : {}) },
      });
    } catch (error) {
      fill(v.list, h('li', {}, errorPanel(error, `Zalo account ${v.account}`)));
      fill(v.more);
      return;
    }
    if (!older) {
      v.items.clear();
      v.list.replaceChildren();
    }
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
  });
}

/** Who a conversation is with: the contact's name (a group: its thread id, since Zalo gives
 * a group's messages, not its name); the thread id until a message named the contact. */
function conversationTitle(conversation) {
  const group = conversation.thread_type === 'group';
  const name = group ? null : conversation.contact_name;
  return [group ? '👥 ' : '👤 ', name ?? conversation.thread_id];
}

/** The newest message on one line: "You: …" for the business's own, "Name: …" in a group. */
function conversationPreview(conversation) {
  const text = conversation.last_message_preview;
  if (text == null) return '';
  if (conversation.last_message_direction === 'out') return `You: ${text}`;
  if (conversation.thread_type === 'group' && conversation.contact_name) return `${conversation.contact_name}: ${text}`;
  return text;
}

function conversationItem(v, conversation) {
  const key = conversation.thread_id;
  const badge = h('span', { class: 'unread' });
  const time = h('span', { class: 'conversation-time muted' }, timeEl(conversation.last_message_at));
  const title = h('span', { class: 'conversation-title', title: key }, ...conversationTitle(conversation));
  const preview = h('span', { class: 'conversation-preview muted' }, conversationPreview(conversation));
  const link = h('a', {
    class: 'conversation',
    href: `#/inbox/${v.account}/${encodeURIComponent(key)}`,
    dataset: { key },
  },
  title,
  badge,
  preview,
  time);
  const li = h('li', {}, link);
  const item = { conversation, badge, link, li, time, title, preview };
  li.item = item;
  v.items.set(key, item);
  markCurrent(v, key, item);
  setUnread(v, key, conversation.unread_count);
  return li;
}

/** A conversation's unread count, in the list and, when it is open, in its header. */
function setUnread(v, key, count, pending = false) {
  const item = v.items.get(key);
  if (item) {
    item.conversation.unread_count = count;
    item.badge.textContent = String(count);
    item.badge.dataset.count = String(count);
    item.badge.hidden = count === 0;
    item.badge.classList.toggle('pending', pending);
    item.badge.setAttribute('aria-label', `${count} unread`);
  }
  if (key === v.key && v.header) {
    v.header.textContent = count ? `${count} unread` : 'All read';
    v.header.dataset.count = String(count);
  }
}

const instant = (iso) => (iso ? Date.parse(iso) : -Infinity);

/** Whether conversation state `a` is older than `b` (a repeat delivered after a newer one). */
function older(a, b) {
  const [am, bm, ar, br] = [instant(a.last_message_at), instant(b.last_message_at), instant(a.last_read_at), instant(b.last_read_at)];
  return (am < bm && ar <= br) || (am <= bm && ar < br);
}

/** The inbox's order: newest activity first, then the higher id. */
function listedBefore(a, b) {
  const am = instant(a.last_message_at);
  const bm = instant(b.last_message_at);
  return am > bm || (am === bm && a.id > b.id);
}

/** A conversation's new state: its badge and time, and its place in the list. */
function placeConversation(v, conversation) {
  const key = conversation.thread_id;
  let item = v.items.get(key);
  if (item && older(conversation, item.conversation)) return;
  const last = v.list.lastElementChild?.item;
  if (!item && v.cursor && last && listedBefore(last.conversation, conversation)) {
    return; // below the loaded pages: the next older page brings it
  }
  if (item) {
    item.conversation = { ...item.conversation, ...conversation };
    fill(item.time, timeEl(conversation.last_message_at));
    fill(item.title, ...conversationTitle(item.conversation));
    fill(item.preview, conversationPreview(item.conversation));
    setUnread(v, key, conversation.unread_count);
  } else {
    if (!v.items.size) v.list.replaceChildren(); // "No conversation yet."
    conversationItem(v, conversation);
    item = v.items.get(key);
  }
  const next = [...v.list.children].find((li) => li !== item.li && li.item && listedBefore(conversation, li.item.conversation));
  if (next) {
    if (next !== item.li.nextElementSibling) v.list.insertBefore(item.li, next);
  } else if (item.li !== v.list.lastElementChild || !item.li.isConnected) {
    v.list.append(item.li);
  }
}

async function openConversation(v, key) {
  const unread = h('span', { class: 'thread-unread muted', dataset: { count: '' } }, '');
  v.header = unread;
  setUnread(v, key, v.items.get(key)?.conversation.unread_count ?? 0);
  const start = h('div', { class: 'timeline-start muted', id: 'timeline-start', dataset: { state: 'more' } }, 'Scroll up for older messages');
  const messages = h('ol', { class: 'messages' });
  const scroller = h('div', { class: 'timeline', tabindex: '0', 'aria-label': 'Messages' }, start, messages);
  const hint = h('button', { type: 'button', class: 'new-messages', hidden: true });
  fill(v.thread,
    h('header', { class: 'thread-head' },
      h('h2', { title: key }, ...(v.items.has(key) ? conversationTitle(v.items.get(key).conversation).slice(1) : [key])),
      unread,
      busyButton('Mark read', () => markRead(v, key), { class: 'mark-read' })),
    scroller,
    hint);
  const timeline = new Timeline(v.account, key, scroller, start, messages, hint);
  v.timeline = timeline;
  await v.live.during(async () => {
    await timeline.start();
    // The count as the read side has it now (the list may be older than this conversation).
    try {
      const reply = await api(`api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}/unread`);
      setUnread(v, key, reply.data.unread);
    } catch (error) {
      if (error.status === 404) fill(v.thread, errorPanel(error, `conversation ${key}`));
    }
  });
}

async function markRead(v, key) {
  const before = v.items.get(key)?.conversation.unread_count ?? 0;
  const base = `api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}`;
  let readAt;
  try {
    readAt = (await api(`${base}/read`, { method: 'POST', body: {} })).data.read_at;
  } catch (error) {
    notify(explain(error, `conversation ${key}`), 'error');
    return;
  }
  // Accepted (202) and applied asynchronously: show it at once, then what the server counts
  // (the conversation's live event says so too, in every tab).
  setUnread(v, key, 0, true);
  const deadline = Date.now() + 15000;
  while (Date.now() < deadline) {
    try {
      const reply = await api(`${base}/unread`);
      const applied = reply.data.last_read_at && new Date(reply.data.last_read_at) >= new Date(readAt);
      if (applied) {
        setUnread(v, key, reply.data.unread);
        notify(`Marked read up to ${when(readAt)}.`);
        return;
      }
    } catch (error) {
      setUnread(v, key, before);
      notify(explain(error, `conversation ${key}`), 'error');
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  v.items.get(key)?.badge.classList.remove('pending');
  notify('Marked read; the server has not applied it yet — the count will follow.');
}

/** One conversation's messages, oldest at the top; each older page is fetched with the cursor
 * the previous page returned (next_before_sent_at, next_before_id): nothing twice, no gap. New
 * ones arrive live, in their place; a reader scrolled up keeps their place and gets a hint. */
class Timeline {
  constructor(account, key, scroller, marker, list, hint) {
    Object.assign(this, { account, key, scroller, marker, list, hint });
    this.cursor = null;
    this.hasMore = true;
    this.loading = false;
    this.seen = new Set();
    this.duplicates = 0;
    this.unseenBelow = 0;
    scroller.addEventListener('scroll', () => {
      if (this.atBottom()) this.showHint(0);
      this.fillUp();
    }, { passive: true });
    hint.addEventListener('click', () => {
      this.scroller.scrollTop = this.scroller.scrollHeight;
      this.showHint(0);
    });
  }

  atBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM;
  }

  showHint(count) {
    this.unseenBelow = count;
    this.hint.hidden = count === 0;
    this.hint.textContent = `↓ ${plural(count, 'new message')}`;
  }

  /** A message of this conversation from the live stream: shown once, in (sent_at, id) order. */
  arrived(m) {
    if (this.seen.has(m.id)) return;
    // Walk up from the newest to the first shown message that sorts before this one.
    let next = null;
    let above = this.list.lastElementChild;
    while (above && sortsAfter(above, m)) {
      next = above;
      above = above.previousElementSibling;
    }
    if (!above && this.hasMore && this.list.firstElementChild) return; // older than what is loaded: a page brings it
    const follow = this.atBottom();
    const height = this.scroller.scrollHeight;
    const el = messageItem(m, this.list);
    this.list.insertBefore(el, next);
    this.seen.add(m.id);
    this.scroller.dataset.loaded = String(this.seen.size);
    const shown = el.getBoundingClientRect();
    const pane = this.scroller.getBoundingClientRect();
    if (follow) this.scroller.scrollTop = this.scroller.scrollHeight;
    else if (shown.bottom <= pane.top) this.scroller.scrollTop += this.scroller.scrollHeight - height; // above the reader: keep their place
    else if (shown.top >= pane.bottom) this.showHint(this.unseenBelow + 1);
    if (this.marker.dataset.state === 'start' && this.seen.size === 1) this.setState('start', 'Beginning of the conversation');
  }

  /** After a reset: the newest page, merged; if even that is all new, the gap is too wide to
   * fill in place, and the timeline starts over. */
  async catchUp() {
    let page;
    try {
      page = await api(`api/zalo-accounts/${this.account}/messages`, {
        query: { conversation_key: this.key, limit: MESSAGES_PER_PAGE },
      });
    } catch {
      return; // the next reset or a reload brings it; the stream goes on meanwhile
    }
    const fresh = page.data.filter((m) => !this.seen.has(m.id));
    if (this.seen.size && fresh.length === page.data.length && page.pagination.has_more) {
      this.list.replaceChildren();
      this.seen.clear();
      this.cursor = null;
      this.hasMore = true;
      this.showHint(0);
      await this.start();
      return;
    }
    for (const m of fresh.reverse()) this.arrived(m);
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

/** Whether the shown message `el` comes after message `m` in the timeline's (sent_at, id) order. */
function sortsAfter(el, m) {
  const shown = Date.parse(el.dataset.sentAt);
  const sent = Date.parse(m.sent_at);
  return shown > sent || (shown === sent && Number(el.dataset.id) > m.id);
}

function messageItem(m, list) {
  const who = m.sender_name || m.sender_id || (m.direction === 'out' ? 'Account' : 'Customer');
  const attachments = Array.isArray(m.attachments) ? m.attachments.length : m.attachments ? 1 : 0;
  return h('li', { class: `message ${m.direction}`, dataset: { id: m.id, msgId: m.msg_id, sentAt: m.sent_at } },
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

