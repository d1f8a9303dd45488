// The Zalo inbox: an account of the token, its conversations (newest activity first, unread
// counts), one conversation's timeline (older pages load as you scroll up), mark read, replies
// (the composer under the timeline; each reply shown at once and then as it moves: queued, sent
// ✓, delivered ✓✓, seen, or failed with its reason and a retry); live from the account's event
// stream (conversations reorder, new messages append, replies move on, reads in other tabs).
// A team works it together: conversations are assigned (Mine / Unassigned / All) and have a
// status (open, resolved, snoozed); the open one's header picks its assignee and changes its
// status, and says who else is viewing or typing in it. The open conversation, read at its foot
// while the tab is visible, is marked read as messages arrive; the tab's title counts what is
// unread; a new message for me (or for no one) notifies while the tab is hidden, if asked to.
// The sidebar searches the account's messages (or the open conversation's); a result opens its
// conversation at the message (#/inbox/<account>/<conversation>/<msg_id>), read from there
// towards the newest as the reader scrolls down.
import { alertOf, alertSettings } from './alerts.js';
import { api, explain, payload } from './api.js';
import { Composer } from './composer.js';
import { fill, h, plural, timeEl, when } from './dom.js';
import { follow, gate, stopFollowing } from './live.js';
import * as outbox from './outbox.js';
import { avatar, myName, nameOf, remember } from './people.js';
import { Beacon, Presence } from './presence.js';
import { go } from './router.js';
import { SearchBox, showFound, snippetEl } from './search.js';
import { session } from './session.js';
import { cannedReplies, fillPlaceholders, isOwner, roster } from './team.js';
import { busyButton, errorPanel, notify, rovingList, setTitle } from './ui.js';

const MESSAGES_PER_PAGE = 30;
const CONVERSATIONS_PER_PAGE = 20;
// Load the next older page once the reader is this close (px) to the top of the timeline.
const NEAR_TOP = 120;
// A reader this close (px) to the bottom follows new messages; further up, they stay put.
const NEAR_BOTTOM = 40;

// After a message arrives in the open conversation, mark it read this much later (one request
// for a burst of messages).
const READ_DEBOUNCE_MS = 300;
// How long a read may take to be applied before the counts shown are the server's again.
const READ_PENDING_MS = 10_000;
// The list's filters, kept for the next visit.
const FILTER = 'agora.inbox.filter';
const ASSIGNEE_FILTERS = [['me', 'Mine'], ['none', 'Unassigned'], ['any', 'All']];
const STATUS_FILTERS = [['open', 'Open'], ['resolved', 'Resolved'], ['snoozed', 'Snoozed'], ['any', 'Any status']];
const STATUS_TEXT = { open: 'Open', resolved: 'Resolved', snoozed: 'Snoozed' };

// {account, root, list, more, thread, items: Map(key -> {conversation, badge, li, time, title, preview}),
//  cursor, key (the open conversation), header (its unread line), timeline, live (the gate),
//  filter {assignee, status}, agents, presence, beacon (this page's presence where it is open)}
let view = null;
let routeCalls = 0;

// The tab comes back into view: what arrived meanwhile in the open conversation is read now
// (if its reader is at its foot), and this page is viewing it again.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && view?.timeline && view.root.isConnected) view.timeline.seen();
});

function savedFilter() {
  try {
    const saved = JSON.parse(localStorage.getItem(FILTER) ?? '{}');
    return {
      assignee: ASSIGNEE_FILTERS.some(([id]) => id === saved.assignee) ? saved.assignee : 'any',
      status: STATUS_FILTERS.some(([id]) => id === saved.status) ? saved.status : 'any',
    };
  } catch {
    return { assignee: 'any', status: 'any' };
  }
}

// A reply's status changes (sending, offline, refused, acknowledged): shown where it is open.
outbox.onChange((entry) => {
  const timeline = view?.timeline;
  if (timeline && timeline.account === entry.account && timeline.key === entry.conversation) timeline.local(entry);
});

export async function inboxView(main, [accountPart, key, at]) {
  const accounts = session.accounts;
  if (!accounts.length) {
    stopFollowing();
    setTitle('Inbox');
    fill(main, h('div', { class: 'empty card' },
      h('h1', {}, 'Zalo inbox'),
      h('p', {}, 'Your token grants no Zalo account. Sign in with a token whose "accounts" claim lists one (e.g. make token SUB=7 ACCOUNTS=1,2), or open the course forum.')));
    view = null;
    return;
  }
  const account = accountPart ? Number(accountPart) : accounts[0];
  // A route taken while this one still loads (a link followed at once) is the one shown.
  const call = (routeCalls += 1);
  if (!view || view.account !== account || !view.root.isConnected) {
    leave(view);
    view?.presence.close();
    const v = (view = buildInbox(main, accounts, account));
    // The stream first, then the lists: whatever commits after the read is in the stream.
    await follow(`api/zalo-accounts/${account}/events`, (kind, data) => v.live.take(kind, data));
    await Promise.all([loadConversations(v), loadTeam(v), v.presence.load()]);
  }
  if (call !== routeCalls) return;
  if ((key ?? null) !== view.key) leave(view);
  view.key = key ?? null;
  // "This conversation only" searches the open one: there is none to search in the list alone.
  view.searchHere.disabled = !key;
  if (!key) view.searchHere.checked = false;
  // On a phone the open conversation takes the screen (its header links back to the list).
  view.root.classList.toggle('open', Boolean(key));
  for (const [itemKey, item] of view.items) markCurrent(view, itemKey, item);
  view.roving.refresh();
  // A phone shows one screen at a time: the one just opened starts at its top.
  if (window.matchMedia('(max-width: 760px)').matches) window.scrollTo(0, 0);
  titleOf(view);
  if (key) await openConversation(view, key, at ?? null);
  else {
    view.timeline = null;
    view.header = null;
    fill(view.thread, h('p', { class: 'muted center' }, view.items.size ? 'Pick a conversation.' : 'No conversation to show.'));
  }
}

/** The tab's title: the unread count of the listed conversations, the open conversation's
 * name, the inbox and its account ("(12) Hoa — Inbox — Zalo account 1 — agora"). */
function titleOf(v) {
  if (view !== v || !v.root.isConnected) return;
  const item = v.key ? v.items.get(v.key) : null;
  const name = v.key ? (item ? conversationTitle(item.conversation)[1] : v.key) : null;
  let unread = 0;
  for (const each of v.items.values()) unread += each.conversation.unread_count ?? 0;
  setTitle(name, `Inbox — Zalo account ${v.account}`);
  if (unread) document.title = `(${unread}) ${document.title}`;
}

/** The inbox is left for another screen (or the person signed out): no presence stays behind. */
export function leaveInbox() {
  leave(view);
}

/** This page is no longer in the open conversation: its presence there ends at once. */
function leave(v) {
  v?.beacon?.close();
  if (v) v.beacon = null;
  clearTimeout(v?.readTimer);
}

/** The account's agents: names for the list and the timeline, the assignee picker's choices. */
async function loadTeam(v) {
  const { agents } = await roster(v.account);
  v.agents = agents;
  v.owner = isOwner(agents);
  v.teamLink.hidden = !agents.length;
  for (const item of v.items.values()) paintAssignee(item);
  v.onTeam?.();
}

function markCurrent(v, key, item) {
  if (key === v.key) item.link.setAttribute('aria-current', 'true');
  else item.link.removeAttribute('aria-current');
}

function onEvent(v, kind, data) {
  if (kind === 'conversation') placeConversation(v, data);
  else if (kind === 'message') {
    remember(data.agent_user_id, data.agent_name);
    noticeOf(v, data);
    if (v.timeline?.key === data.thread_id) v.timeline.arrived(data);
  } else if (kind === 'presence') v.presence.take(data);
  else if (kind === 'reconnected') v.presence.load(); // presence events are never replayed
  else if (kind === 'changed') changed(v, data);
  else if (kind === 'reset') refetch(v);
}

/** Whether `conversation` is for this person to answer: assigned to them, or to no one. */
function forMe(conversation) {
  const assignee = conversation?.assignee;
  return assignee == null || assignee.user_id === session.userId;
}

/** A new customer message: a notification (tab hidden) and a beep, each if turned on; once per
 * message however often the stream delivers it. */
function noticeOf(v, m) {
  if (m.direction !== 'in') return;
  const identity = m.id ? `i:${m.id}` : `m:${m.msg_id}`;
  if (v.noticed.has(identity)) return;
  v.noticed.add(identity);
  const item = v.items.get(m.thread_id);
  // A conversation out of the list's filter is known by its last event, if any.
  if (!forMe(item?.conversation ?? v.known.get(m.thread_id))) return;
  const name = item ? conversationTitle(item.conversation)[1] : (m.sender_name || m.thread_id);
  alertOf({
    title: `${name} — Zalo account ${v.account}`,
    body: m.content ?? `[${m.msg_type ?? 'message'}]`,
    tag: `agora-${v.account}-${identity}`,
    audible: v.key !== m.thread_id,
    onOpen: () => go(`#/inbox/${v.account}/${encodeURIComponent(m.thread_id)}`),
  });
}

/** An object too large for the stream, named: read it, then apply it as its event. */
function changed(v, data) {
  if (data.kind === 'conversation') return refetch(v);
  if (data.kind !== 'message' || v.timeline?.key !== data.conversation_key) return null;
  // A reply not sent yet (no msg_id): the newest page shows it, merged like a missed event.
  if (!data.msg_id) return v.live.during(() => v.timeline.catchUp());
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
  const filter = savedFilter();
  const setFilter = (change) => {
    Object.assign(view.filter, change);
    localStorage.setItem(FILTER, JSON.stringify(view.filter));
    for (const button of tabs.querySelectorAll('button')) button.setAttribute('aria-pressed', String(button.dataset.assignee === view.filter.assignee));
    loadConversations(view);
  };
  const tabs = h('div', { class: 'filter-tabs', role: 'group', 'aria-label': 'Whose conversations' },
    ASSIGNEE_FILTERS.map(([id, text]) => h('button', {
      type: 'button', class: 'filter-tab', dataset: { assignee: id }, 'aria-pressed': String(filter.assignee === id),
      onclick: () => setFilter({ assignee: id }),
    }, text)));
  const statusPicker = h('select', { id: 'status-filter', class: 'status-filter', onchange: (e) => setFilter({ status: e.target.value }) },
    STATUS_FILTERS.map(([id, text]) => h('option', { value: id, selected: filter.status === id }, text)));
  const teamLink = h('a', { class: 'team-link', href: `#/team/${account}/agents`, hidden: true }, 'Team');
  const searchHere = h('input', { type: 'checkbox', id: 'inbox-search-here', disabled: true });
  const search = new SearchBox({
    id: 'inbox-search',
    path: `api/zalo-accounts/${account}/search`,
    label: 'Search messages',
    placeholder: 'Search messages',
    what: `the messages of Zalo account ${account}`,
    scope: () => (searchHere.checked && view?.key ? { conversation_key: view.key } : {}),
    options: [h('label', { class: 'check search-here', for: searchHere.id }, searchHere, 'This conversation only')],
    item: (hit) => messageHit(view, account, hit),
  });
  const list = h('ol', { class: 'conversations', 'aria-label': 'Conversations' });
  const more = h('div', { class: 'list-more' });
  const thread = h('section', { class: 'thread', 'aria-label': 'Conversation' });
  const root = h('div', { class: 'inbox' },
    h('aside', { class: 'sidebar', 'aria-labelledby': 'inbox-title' },
      h('h1', { id: 'inbox-title', class: 'inbox-title' }, `Inbox — Zalo account ${account}`),
      h('div', { class: 'sidebar-head' },
        h('label', { for: 'account' }, 'Account'), picker,
        busyButton('↻', () => loadConversations(view), { class: 'ghost', title: 'Reload the conversations', 'aria-label': 'Reload the conversations' })),
      h('div', { class: 'sidebar-filters' },
        tabs,
        h('label', { for: 'status-filter', class: 'visually-hidden' }, 'Status'), statusPicker),
      h('div', { class: 'sidebar-tools' }, alertSettings(), teamLink),
      h('div', { class: 'sidebar-search' }, search.el),
      list, more),
    thread);
  fill(main, root);
  const v = {
    account, root, list, more, thread, items: new Map(), cursor: null, listLoads: 0, key: null, header: null, timeline: null,
    filter, teamLink, agents: [], owner: false, beacon: null, noticed: new Set(), known: new Map(),
    search, searchHere,
  };
  v.presence = new Presence(account, (key) => presenceChanged(v, key));
  // The conversations are one Tab stop; the arrow keys move between them.
  v.roving = rovingList(list, 'a.conversation');
  v.live = gate((kind, data) => onEvent(v, kind, data));
  return v;
}

/** A page of conversations (the first, or the next older one); events wait until it is in. */
function loadConversations(v, older = false, loading = true) {
  // A first page starts the list over (a filter chosen, a reset): the answer of any load begun
  // before it, slower or not, is of a list no longer shown, and is dropped.
  if (!older) v.listLoads += 1;
  const load = v.listLoads;
  return v.live.during(async () => {
    if (!older && loading) fill(v.list, h('li', { class: 'muted', role: 'status' }, 'Loading conversations…'));
    let page;
    try {
      page = await api(`api/zalo-accounts/${v.account}/conversations`, {
        query: {
          limit: CONVERSATIONS_PER_PAGE,
          // The defaults (any, any) are not sent: the list as it always was.
          assignee: v.filter.assignee === 'any' ? null : v.filter.assignee,
          status: v.filter.status === 'any' ? null : v.filter.status,
          ...(older ? v.cursor : {}),
        },
      });
    } catch (error) {
      if (load !== v.listLoads) return;
      fill(v.list, h('li', {}, errorPanel(error, `Zalo account ${v.account}`)));
      fill(v.more);
      return;
    }
    if (load !== v.listLoads) return;
    if (!older) {
      v.items.clear();
      v.list.replaceChildren();
    }
    for (const conversation of page.data) {
      if (v.items.has(conversation.thread_id)) continue;
      v.list.append(conversationItem(v, conversation));
    }
    if (!v.items.size) fill(v.list, h('li', { class: 'muted empty-list' }, emptyText(v)));
    v.roving.refresh();
    titleOf(v);
    const p = page.pagination;
    v.cursor = p.has_more
      ? { before_last_message_at: p.next_before_last_message_at, before_id: p.next_before_id }
      : null;
    fill(v.more, p.has_more ? busyButton('Older conversations', () => loadConversations(v, true), { class: 'ghost wide' }) : null);
  });
}

/** A message found: who the conversation is with (as the list names it), when, the snippet. */
function messageHit(v, account, hit) {
  const m = hit.message;
  const item = v?.items.get(m.thread_id);
  const name = item ? conversationTitle(item.conversation)[1] : (m.direction === 'in' && m.sender_name) || m.thread_id;
  return {
    href: `#/inbox/${account}/${encodeURIComponent(m.thread_id)}/${encodeURIComponent(m.msg_id)}`,
    children: [
      h('span', { class: 'search-hit-head' },
        h('strong', { class: 'search-hit-name' }, name), ' ',
        h('span', { class: 'muted' }, timeEl(m.sent_at), hit.archived ? ' · archived' : '')),
      h('span', { class: 'search-hit-text' }, snippetEl(hit.match)),
    ],
  };
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

function emptyText(v) {
  const { assignee, status } = v.filter;
  if (assignee === 'any' && status === 'any') return 'No conversation yet: new customer messages appear here.';
  const whose = { me: 'assigned to you', none: 'unassigned', any: '' }[assignee];
  const state = status === 'any' ? '' : STATUS_TEXT[status].toLowerCase();
  return `No ${[state, 'conversation'].filter(Boolean).join(' ')} ${whose}`.trim() + '.';
}

/** A conversation's status as it reads now: a snooze whose time has passed is open again. */
function statusOf(conversation) {
  const status = conversation.status ?? 'open';
  if (status === 'snoozed' && conversation.snoozed_until && Date.parse(conversation.snoozed_until) <= Date.now()) return 'open';
  return status;
}

/** Whether a conversation belongs in the list under its filters. */
function matches(v, conversation) {
  const { assignee, status } = v.filter;
  const who = conversation.assignee?.user_id ?? null;
  if (assignee === 'me' && who !== session.userId) return false;
  if (assignee === 'none' && who != null) return false;
  return status === 'any' || statusOf(conversation) === status;
}

/** A row's assignee (initials, the name in its title) and its status when not open. */
function paintAssignee(item) {
  const c = item.conversation;
  const person = c.assignee;
  if (person) remember(person.user_id, person.name);
  const status = statusOf(c);
  fill(item.team,
    person ? avatar(person.user_id, person.name) : null,
    h('span', { class: 'visually-hidden' }, person ? `Assigned to ${nameOf(person.user_id, person.name)}` : 'Unassigned'),
    status !== 'open' ? h('span', { class: `status-chip ${status}` }, status === 'snoozed' && c.snoozed_until ? `Snoozed until ${when(c.snoozed_until)}` : STATUS_TEXT[status]) : null);
  item.link.dataset.assignee = person ? String(person.user_id) : '';
  item.link.dataset.status = status;
}

function conversationItem(v, conversation) {
  const key = conversation.thread_id;
  const badge = h('span', { class: 'unread' });
  const team = h('span', { class: 'conversation-team' });
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
  time,
  team);
  const li = h('li', {}, link);
  const item = { conversation, badge, link, li, time, title, preview, team };
  li.item = item;
  v.items.set(key, item);
  markCurrent(v, key, item);
  paintAssignee(item);
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
  titleOf(v);
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
  const merged = item ? { ...(v.known.get(key) ?? {}), ...item.conversation, ...conversation } : { ...(v.known.get(key) ?? {}), ...conversation };
  v.known.set(key, { assignee: merged.assignee ?? null, status: merged.status });
  if (key === v.key) v.onConversation?.(merged);
  if (!matches(v, merged)) {
    // Out of the current filter (assigned elsewhere, resolved…): out of the list.
    if (item) {
      item.li.remove();
      v.items.delete(key);
      if (!v.items.size) fill(v.list, h('li', { class: 'muted empty-list' }, emptyText(v)));
      v.roving.refresh();
      titleOf(v);
    }
    return;
  }
  // Open, visible and read at its foot: everything it holds is on screen, so it is read (a new
  // message as it arrives, or a count that any event still carries), and the badge never rises.
  const open = key === v.key && v.timeline?.key === key ? v.timeline : null;
  let count = conversation.unread_count;
  if (open && count > 0) {
    if (open.reading()) {
      count = 0;
      // A new message is read (debounced: once per burst); an event that still counts what this
      // page's read is about to clear asks no second read.
      const arrived = instant(conversation.last_message_at) > instant(item?.conversation.last_message_at);
      if (arrived || !open.readPending()) open.readSoon();
    } else if (count > (item?.conversation.unread_count ?? 0)) {
      open.arrivedUnread = true; // unseen (hidden, or read higher up): read once seen
    }
  } else if (open && count === 0) {
    open.readAt = 0;
  }
  if (item) {
    item.conversation = { ...merged, unread_count: count };
    fill(item.time, timeEl(conversation.last_message_at));
    fill(item.title, ...conversationTitle(item.conversation));
    fill(item.preview, conversationPreview(item.conversation));
    paintAssignee(item);
    setUnread(v, key, count, count !== conversation.unread_count);
  } else {
    if (!v.items.size) v.list.replaceChildren(); // "No conversation yet."
    conversationItem(v, { ...conversation, unread_count: count });
    item = v.items.get(key);
  }
  const next = [...v.list.children].find((li) => li !== item.li && li.item && listedBefore(conversation, li.item.conversation));
  if (next) {
    if (next !== item.li.nextElementSibling) v.list.insertBefore(item.li, next);
  } else if (item.li !== v.list.lastElementChild || !item.li.isConnected) {
    v.list.append(item.li);
  }
  v.roving.refresh();
}

async function openConversation(v, key, at = null) {
  const unread = h('span', { class: 'thread-unread muted', dataset: { count: '' } }, '');
  v.header = unread;
  setUnread(v, key, v.items.get(key)?.conversation.unread_count ?? 0);
  const start = h('div', { class: 'timeline-start muted', id: 'timeline-start', dataset: { state: 'more' } }, 'Scroll up for older messages');
  const messages = h('ol', { class: 'messages' });
  const scroller = h('div', { class: 'timeline', tabindex: '0', 'aria-label': 'Messages' }, start, messages);
  const hint = h('button', { type: 'button', class: 'new-messages', hidden: true });
  const name = v.items.has(key) ? conversationTitle(v.items.get(key).conversation)[1] : key;
  let timeline = null;
  const base = `api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}`;
  // The same conversation shown again (a reload of the route) keeps its presence going.
  if (v.beacon && (v.beacon.closed || v.beacon.key !== key)) leave(v);
  const beacon = (v.beacon ??= new Beacon(v.account, key));
  const composer = new Composer(name, ({ content, quote }) => {
    beacon.sent();
    timeline.send(content, quote);
  }, {
    typed: () => beacon.typed(),
    canned: () => cannedReplies(v.account),
    fill: (body) => fillPlaceholders(body, {
      contactName: v.items.get(key)?.conversation.contact_name ?? conversation?.contact_name ?? '',
      agentName: myName(),
    }),
  });
  let conversation = v.items.get(key)?.conversation ?? null;
  const presenceLine = h('div', { class: 'presence-line muted', role: 'status', 'aria-live': 'polite', hidden: true });
  const teamBar = h('div', { class: 'thread-team' });
  const paintTeam = () => paintThreadTeam(v, key, base, conversation, teamBar);
  v.onConversation = (c) => {
    conversation = { ...(conversation ?? {}), ...c };
    paintTeam();
  };
  v.onTeam = paintTeam;
  v.presenceLine = presenceLine;
  fill(v.thread,
    h('header', { class: 'thread-head' },
      h('a', { class: 'thread-back', href: `#/inbox/${v.account}`, 'aria-label': 'Back to the conversations' }, '←'),
      h('h2', { title: key }, ...(v.items.has(key) ? conversationTitle(v.items.get(key).conversation).slice(1) : [key])),
      unread,
      busyButton('Mark read', () => markRead(v, key), { class: 'mark-read' })),
    teamBar,
    presenceLine,
    // The hint floats over the timeline's foot, never over the composer.
    h('div', { class: 'timeline-pane' }, scroller, hint),
    composer.el);
  timeline = new Timeline(v.account, key, scroller, start, messages, hint, composer, at);
  timeline.onRead = () => readArrived(v, key);
  v.timeline = timeline;
  paintTeam();
  presenceChanged(v, key);
  await v.live.during(async () => {
    await timeline.start();
    // The count as the read side has it now (the list may be older than this conversation).
    try {
      const reply = await api(`api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}/unread`);
      setUnread(v, key, reply.data.unread);
      // Opened is read: its newest messages are on screen. Read now if the tab is visible and
      // the reader at the foot, else once they are (as for messages that arrive).
      if (reply.data.unread > 0) {
        timeline.arrivedUnread = true;
        timeline.seen();
      }
    } catch (error) {
      if (error.status === 404) fill(v.thread, errorPanel(error, `conversation ${key}`));
    }
  });
}

/** Someone's presence changed in conversation `key`: the open one's line says so. */
function presenceChanged(v, key) {
  if (key !== v.key || !v.presenceLine) return;
  const { text, title } = v.presence.line(key);
  v.presenceLine.textContent = text;
  v.presenceLine.title = title;
  v.presenceLine.hidden = !text;
}

/** The open conversation's team controls: its assignee (the account's agents), its status and
 * what changes it (Resolve, Reopen, Snooze until…). Each change is the server's answer shown,
 * and every agent's list follows by the stream's conversation event. */
function paintThreadTeam(v, key, base, conversation, bar) {
  if (v.key !== key) return;
  const c = conversation ?? {};
  const status = statusOf(c);
  const assignee = c.assignee ?? null;
  const apply = (reply) => {
    const changed = payload(reply);
    if (changed?.thread_id) placeConversation(v, changed);
  };
  const change = async (path, body, what) => {
    try {
      apply(await api(`${base}/${path}`, { method: 'PUT', body }));
    } catch (error) {
      notify(explain(error, what), 'error');
    }
  };
  const choices = [...v.agents];
  if (assignee && !choices.some((a) => a.user_id === assignee.user_id)) choices.push(assignee);
  const picker = h('select', { id: 'assignee', class: 'assignee-picker', disabled: !v.agents.length },
    h('option', { value: '', selected: !assignee }, 'Unassigned'),
    choices.map((a) => h('option', { value: String(a.user_id), selected: assignee?.user_id === a.user_id },
      a.user_id === session.userId ? `${nameOf(a.user_id, a.name)} (me)` : nameOf(a.user_id, a.name))));
  picker.addEventListener('change', () => change('assignee', { user_id: picker.value ? Number(picker.value) : null }, 'the assignment'));
  const snoozeTo = (until) => change('status', { status: 'snoozed', snoozed_until: until.toISOString() }, 'the snooze');
  const tomorrow = new Date();
  tomorrow.setDate(tomorrow.getDate() + 1);
  tomorrow.setHours(8, 0, 0, 0);
  const snooze = h('details', { class: 'snooze popover' },
    h('summary', {}, 'Snooze'),
    h('div', { class: 'snooze-panel' },
      busyButton('For 1 hour', () => snoozeTo(new Date(Date.now() + 3600_000)), { class: 'ghost snooze-hour' }),
      busyButton(`Until tomorrow ${tomorrow.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}`, () => snoozeTo(tomorrow), { class: 'ghost snooze-tomorrow' })));
  fill(bar,
    assignee ? avatar(assignee.user_id, assignee.name) : null,
    h('label', { for: 'assignee', class: 'visually-hidden' }, 'Assignee'),
    picker,
    h('span', { class: `status-chip ${status}`, dataset: { status } },
      status === 'snoozed' && c.snoozed_until ? `Snoozed until ${when(c.snoozed_until)}` : STATUS_TEXT[status]),
    status === 'open'
      ? busyButton('Resolve', () => change('status', { status: 'resolved' }, 'the status'), { class: 'resolve' })
      : busyButton('Reopen', () => change('status', { status: 'open' }, 'the status'), { class: 'reopen' }),
    status === 'snoozed' ? null : snooze);
}

/** New messages of the open conversation were seen (it is visible, its reader at its foot):
 * read up to now, once for a burst, quietly (the conversation's event brings the count). */
function readArrived(v, key) {
  clearTimeout(v.readTimer);
  if (v.key !== key) return;
  setUnread(v, key, 0, true);
  v.readTimer = setTimeout(async () => {
    if (v.key !== key) return;
    try {
      await api(`api/zalo-accounts/${v.account}/conversations/${encodeURIComponent(key)}/read`, { method: 'POST', body: {} });
    } catch {
      // the next message, or Mark read, tries again
    }
  }, READ_DEBOUNCE_MS);
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
        // What arrived since, on screen as it came, is being read (readArrived): not unread.
        const open = v.key === key && v.timeline?.key === key ? v.timeline : null;
        const count = open?.reading() ? 0 : reply.data.unread;
        if (count !== reply.data.unread && !open.readPending()) open.readSoon();
        setUnread(v, key, count, count !== reply.data.unread);
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
 * ones arrive live, in their place; a reader scrolled up keeps their place and gets a hint.
 * Opened at a message (`around`: a search result), it starts with the page around it and reads
 * newer pages (next_after_*) as the reader reaches the foot, until none is newer; meanwhile
 * live messages wait, since they belong after pages not read yet. */
class Timeline {
  constructor(account, key, scroller, marker, list, hint, composer, around = null) {
    Object.assign(this, { account, key, scroller, marker, list, hint, composer, around });
    this.cursor = null;
    this.hasMore = true;
    this.loading = false;
    // The cursor of the newer pages still to read (a timeline opened at a message), and the
    // live messages that arrived for beyond them, placed once the newest page is in.
    this.newer = null;
    this.beyond = [];
    this.loadingNewer = false;
    // Each shown message by its identity (messageIdentity): one element per message, which
    // later states of it update in place.
    this.shown = new Map();
    // Events of this agent's own replies that came before the reply's 202 named it: merged
    // into the reply once it does (not shown twice meanwhile).
    this.parked = new Map();
    this.duplicates = 0;
    this.unseenBelow = 0;
    // Messages that arrived while the tab was hidden or the reader was higher up: read once
    // the reader is at the foot with the tab visible.
    this.arrivedUnread = false;
    this.readAt = 0; // when this page last read what arrived (0: its read is applied)
    this.onRead = null;
    scroller.addEventListener('scroll', () => {
      if (this.atBottom()) {
        this.showHint(0);
        this.seen();
      }
      this.fillUp();
      this.fillDown();
    }, { passive: true });
    hint.addEventListener('click', () => {
      this.scroller.scrollTop = this.scroller.scrollHeight;
      this.showHint(0);
      this.seen();
    });
  }

  atBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM;
  }

  /** Whether the person reads what arrives: the tab visible, the timeline at its foot. */
  reading() {
    return document.visibilityState === 'visible' && this.scroller.isConnected && this.atBottom() && !this.newer;
  }

  /** A message arrived while reading: mark it read (debounced by the view). */
  readSoon() {
    this.arrivedUnread = false;
    this.readAt = Date.now();
    this.onRead?.();
  }

  /** Whether this page's read is on its way (applied asynchronously): meanwhile an event that
   * still counts what was read does not raise the badge. */
  readPending() {
    return this.readAt > 0 && Date.now() - this.readAt < READ_PENDING_MS;
  }

  /** The reader may now see what arrived unseen: read it. */
  seen() {
    if (this.arrivedUnread && this.reading()) this.readSoon();
  }

  showHint(count) {
    this.unseenBelow = count;
    this.hint.hidden = count === 0;
    this.hint.textContent = `↓ ${plural(count, 'new message')}`;
  }

  /** A message of this conversation from the live stream: shown once, in (sent_at, id) order;
   * a later state of a shown one (a reply sent, delivered, seen) updates it in place. */
  arrived(m) {
    const identity = messageIdentity(m);
    const shown = this.shown.get(identity);
    if (shown) {
      this.update(shown, m);
      return;
    }
    if (this.mineInFlight(m)) {
      this.parked.set(m.cli_msg_id, m);
      return;
    }
    this.insert(identity, m);
  }

  /** Whether `m` may be the event of one of this agent's replies whose 202 is still on its way. */
  mineInFlight(m) {
    return m.direction === 'out' && m.cli_msg_id && m.agent_user_id === session.userId
      && outbox.awaitingAnswer(this.account, this.key);
  }

  /** A new message's element, in its place (the reader's place kept, or followed at the bottom). */
  insert(identity, m) {
    const next = this.placeOf(m);
    if (next === undefined) return; // older than what is loaded: a page brings it
    if (next === null && this.newer) {
      this.beyond.push(m); // after newer pages not read yet: placed once they are
      return;
    }
    const follow = this.atBottom() || identity.startsWith('k:');
    const height = this.scroller.scrollHeight;
    const el = messageItem(m, this);
    this.list.insertBefore(el, next);
    this.shown.set(identity, el);
    this.scroller.dataset.loaded = String(this.shown.size);
    const shown = el.getBoundingClientRect();
    const pane = this.scroller.getBoundingClientRect();
    if (follow) this.scroller.scrollTop = this.scroller.scrollHeight;
    else if (shown.bottom <= pane.top) this.scroller.scrollTop += this.scroller.scrollHeight - height; // above the reader: keep their place
    else if (shown.top >= pane.bottom) this.showHint(this.unseenBelow + 1);
    if (this.marker.dataset.state === 'start' && this.shown.size === 1) this.setState('start', 'Beginning of the conversation');
  }

  /** The element a message goes before (null: at the end; undefined: above the loaded pages). */
  placeOf(m, except = null) {
    // Walk up from the newest to the first shown message that sorts before this one.
    let next = null;
    let above = this.list.lastElementChild;
    while (above && (above === except || sortsAfter(above, m))) {
      if (above !== except) next = above;
      above = above.previousElementSibling;
    }
    if (!above && this.hasMore && next) return undefined;
    return next;
  }

  /** A shown message's new state, merged (states only move forward), and its new place when
   * its time changed (a reply's order time, then Zalo's sent time). */
  update(el, m) {
    const merged = mergeMessage(el.message, m);
    if (merged === el.message) return;
    const fresh = messageItem(merged, this);
    el.replaceWith(fresh);
    this.shown.set(messageIdentity(merged), fresh);
    if (merged.sent_at !== el.message.sent_at || merged.id !== el.message.id) {
      const next = this.placeOf(merged, fresh);
      if (next !== undefined && next !== fresh.nextElementSibling) this.list.insertBefore(fresh, next);
    }
  }

  /** Queue a reply: shown at once as pending, keyed by its Idempotency-Key until the 202. */
  send(content, quote) {
    const body = { content, ...(quote ? { quote_msg_id: quote.msg_id } : {}) };
    const entry = outbox.send(this.account, this.key, body, quote?.text ?? null);
    // A reply goes at the foot of the conversation: from an older place, the newest page first.
    if (this.newer) this.toNewest().then(() => this.local(outbox.get(entry.key) ?? entry));
    else this.local(entry);
  }

  /** Leave the place a search opened and show the newest messages, as a plain open does. */
  async toNewest() {
    this.list.replaceChildren();
    this.shown.clear();
    this.cursor = null;
    this.hasMore = true;
    this.newer = null;
    this.beyond = [];
    this.around = null;
    this.showHint(0);
    await this.start();
  }

  /** A reply of the outbox as it is now: pending, offline, refused, or acknowledged (then it is
   * the order, known by its cli_msg_id, and whatever the stream said of it first). */
  local(entry) {
    const pending = `k:${entry.key}`;
    const el = this.shown.get(pending);
    if (entry.status !== 'accepted') {
      const m = localMessage(entry);
      if (el) {
        const fresh = messageItem(m, this);
        el.replaceWith(fresh);
        this.shown.set(pending, fresh);
      } else {
        this.insert(pending, m);
        this.scroller.scrollTop = this.scroller.scrollHeight;
      }
      return;
    }
    const order = orderMessage(entry);
    const identity = messageIdentity(order);
    this.shown.delete(pending);
    const known = this.shown.get(identity);
    if (known) {
      el?.remove(); // the stream (or a reload) showed it first
      this.update(known, order);
    } else if (el) {
      el.message = { ...el.message, cli_msg_id: order.cli_msg_id }; // for the merge below
      this.shown.set(identity, el);
      this.update(el, order);
    } else {
      this.insert(identity, order);
    }
    const parked = this.parked.get(order.cli_msg_id);
    this.parked.delete(order.cli_msg_id);
    if (parked) this.arrived(parked);
    if (!outbox.awaitingAnswer(this.account, this.key)) {
      // Another tab's replies, or this one's sent before a reload: nothing will claim them.
      const rest = [...this.parked.values()];
      this.parked.clear();
      for (const m of rest) this.arrived(m);
    }
  }

  /** Send a failed reply again: the order back in the conversation's queue. */
  async retry(m) {
    const base = `api/zalo-accounts/${this.account}/conversations/${encodeURIComponent(this.key)}`;
    try {
      const reply = await api(`${base}/messages/${encodeURIComponent(m.cli_msg_id)}/retry`, { method: 'POST' });
      this.arrived(orderMessage({ order: reply.data }));
    } catch (error) {
      notify(explain(error, 'this reply'), 'error');
    }
  }

  /** The replies of the outbox not acknowledged yet (sent from this tab before the conversation
   * was left), after what the server has: still on their way. */
  showUnacknowledged() {
    for (const entry of outbox.unacknowledged(this.account, this.key)) this.local(entry);
  }

  /** After a reset: the newest page, merged; if even that is all new, the gap is too wide to
   * fill in place, and the timeline starts over. */
  async catchUp() {
    if (this.newer) {
      await this.toNewest(); // the newer pages read after the reset bring what it missed
      return;
    }
    let page;
    try {
      page = await api(`api/zalo-accounts/${this.account}/messages`, {
        query: { conversation_key: this.key, limit: MESSAGES_PER_PAGE },
      });
    } catch {
      return; // the next reset or a reload brings it; the stream goes on meanwhile
    }
    const fresh = page.data.filter((m) => !this.shown.has(messageIdentity(m)));
    if (this.shown.size && fresh.length === page.data.length && page.pagination.has_more) {
      this.list.replaceChildren();
      this.shown.clear();
      this.cursor = null;
      this.hasMore = true;
      this.showHint(0);
      await this.start();
      return;
    }
    // What it missed of the shown ones too: a reply's state moves on while the stream is down.
    for (const m of page.data.reverse()) this.arrived(m);
  }

  async start() {
    const at = this.around;
    await this.load();
    this.around = null;
    const found = at ? this.list.querySelector(`.message[data-msg-id="${CSS.escape(at)}"]`) : null;
    if (!this.newer) this.showUnacknowledged();
    if (found) showFound(found);
    else this.scroller.scrollTop = this.scroller.scrollHeight;
    await this.fillUp();
    await this.fillDown();
  }

  /** Load newer pages while the foot is in view (a timeline opened at a message). */
  async fillDown() {
    while (this.newer && !this.loadingNewer && this.scroller.isConnected && this.atBottom()) {
      if (!(await this.loadNewer())) return;
    }
  }

  /** The page just newer than what is shown, appended at the foot; the last one brings the
   * live messages that waited for it. */
  async loadNewer() {
    this.loadingNewer = true;
    let page;
    try {
      page = await api(`api/zalo-accounts/${this.account}/messages`, {
        query: { conversation_key: this.key, limit: MESSAGES_PER_PAGE, ...this.newer },
      });
    } catch (error) {
      this.loadingNewer = false;
      notify(explain(error, `conversation ${this.key}`), 'error');
      return false;
    }
    this.loadingNewer = false;
    if (!this.newer) return false; // started over meanwhile
    const top = this.scroller.scrollTop;
    for (const message of [...page.data].reverse()) {
      const identity = messageIdentity(message);
      if (this.shown.has(identity)) {
        this.duplicates += 1;
        continue;
      }
      const el = messageItem(message, this);
      this.shown.set(identity, el);
      this.list.append(el);
    }
    this.scroller.scrollTop = top; // the reader stays where they were; the new page is below
    this.scroller.dataset.duplicates = String(this.duplicates);
    this.scroller.dataset.loaded = String(this.shown.size);
    const p = page.pagination;
    this.newer = p.has_newer ? { after_sent_at: p.next_after_sent_at, after_id: p.next_after_id } : null;
    this.scroller.dataset.newer = String(Boolean(this.newer));
    if (!this.newer) {
      const waited = this.beyond;
      this.beyond = [];
      for (const m of waited) this.arrived(m);
      this.showUnacknowledged();
    }
    return true;
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
    const around = this.around && !this.cursor ? { around: this.around } : {};
    try {
      page = await api(`api/zalo-accounts/${this.account}/messages`, {
        query: { conversation_key: this.key, limit: MESSAGES_PER_PAGE, ...(this.cursor ?? {}), ...around },
      });
    } catch (error) {
      this.loading = false;
      if (around.around && error.status === 404) {
        // The message is gone (deleted with its history): the conversation as it is now.
        notify('That message is no longer in this conversation: showing its newest messages.');
        this.around = null;
        return this.load();
      }
      this.setState('error', explain(error, `conversation ${this.key}`));
      return false;
    }
    // Newest first from the API; shown oldest first, above what is already there.
    const fresh = [];
    for (const message of page.data) {
      const identity = messageIdentity(message);
      const shown = this.shown.get(identity);
      if (shown) {
        // A reply the stream showed first (its state merged), or a message seen twice.
        if (message.direction === 'out' && message.cli_msg_id) this.update(shown, message);
        else this.duplicates += 1;
        continue;
      }
      fresh.push([identity, message]);
    }
    const fromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
    const items = fresh.reverse().map(([identity, m]) => {
      const el = messageItem(m, this);
      this.shown.set(identity, el);
      return el;
    });
    this.list.prepend(...items);
    this.scroller.scrollTop = this.scroller.scrollHeight - fromBottom;
    this.scroller.dataset.duplicates = String(this.duplicates);
    this.scroller.dataset.loaded = String(this.shown.size);
    const p = page.pagination;
    this.hasMore = p.has_more;
    this.cursor = p.has_more ? { before_sent_at: p.next_before_sent_at, before_id: p.next_before_id } : null;
    if (around.around && p.has_newer) {
      this.newer = { after_sent_at: p.next_after_sent_at, after_id: p.next_after_id };
      this.scroller.dataset.newer = 'true';
    }
    this.loading = false;
    if (this.hasMore) this.setState('more', 'Scroll up for older messages');
    else this.setState('start', this.shown.size ? 'Beginning of the conversation' : 'No messages yet');
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

/** Who a message is in the timeline: an outgoing one by its cli_msg_id (a reply is an order
 * first, id 0 and no msg_id, then the stored echo), a reply not yet acknowledged by its
 * Idempotency-Key, any other by its id (or msg_id). */
function messageIdentity(m) {
  if (m.key) return `k:${m.key}`;
  if (m.direction === 'out' && m.cli_msg_id) return `c:${m.cli_msg_id}`;
  return m.id ? `i:${m.id}` : `m:${m.msg_id}`;
}

// Delivery states in the order they happen: a state never moves back. failed ranks with
// queued: a retry (queued again) and a late echo (sent) move it on.
const RANK = { queued: 1, failed: 1, sent: 2, delivered: 3, seen: 4 };

/** A shown message with a newer view of it: later states win, an earlier one only fills in
 * what it adds; the stored message's id, msg_id and time (Zalo's) outlive the order's. */
function mergeMessage(old, m) {
  const before = RANK[old.delivery_state] ?? 0;
  const after = RANK[m.delivery_state] ?? 0;
  let merged;
  if (after < before) {
    merged = { ...old, id: old.id || m.id, msg_id: old.msg_id || m.msg_id };
  } else {
    merged = { ...old, ...m, id: m.id || old.id, msg_id: m.msg_id || old.msg_id, local: m.local ?? null, key: m.key ?? null };
    for (const name of ['delivered_at', 'seen_at', 'quote_preview', 'quote_payload', 'agent_user_id', 'agent_name']) {
      merged[name] = m[name] ?? old[name] ?? null;
    }
    if (!m.id && old.id) merged.sent_at = old.sent_at;
  }
  return JSON.stringify(merged) === JSON.stringify(old) ? old : merged;
}

/** A reply the gateway has not acknowledged, as the timeline shows messages. */
function localMessage(entry) {
  return {
    id: 0,
    msg_id: '',
    cli_msg_id: null,
    thread_id: entry.conversation,
    direction: 'out',
    content: entry.body.content,
    quote_msg_id: entry.body.quote_msg_id ?? null,
    quote_preview: entry.quoteText,
    sent_at: entry.createdAt,
    delivery_state: null,
    reactions: [],
    agent_user_id: session.userId,
    agent_name: null,
    key: entry.key,
    local: entry.status,
    local_reason: entry.reason,
  };
}

/** An order (a 202's data) as the timeline shows messages: what the server shows of it too. */
function orderMessage({ order: o, quoteText = null }) {
  return {
    id: 0,
    msg_id: o.msg_id ?? '',
    cli_msg_id: o.cli_msg_id,
    thread_id: o.conversation_key,
    direction: 'out',
    content: o.content,
    attachments: o.attachments,
    quote_msg_id: o.quote_msg_id,
    quote_preview: quoteText,
    sent_at: o.queued_at,
    delivery_state: o.state,
    delivered_at: o.delivered_at,
    seen_at: o.seen_at,
    reactions: [],
    agent_user_id: o.agent_user_id,
    agent_name: o.agent_name ?? null,
    failure_class: o.failure_class,
    failure_reason: o.failure_reason,
  };
}

function messageItem(m, timeline) {
  // A reply sent through agora is its agent's (by name); others by who Zalo says sent them.
  const agent = m.direction === 'out' && m.agent_user_id != null;
  const who = agent ? nameOf(m.agent_user_id, m.agent_name) : m.sender_name || m.sender_id || (m.direction === 'out' ? 'Account' : 'Customer');
  const attachments = Array.isArray(m.attachments) ? m.attachments.length : m.attachments ? 1 : 0;
  const quotable = m.msg_id && !m.local;
  const el = h('li', {
    class: `message ${m.direction}${m.local ? ' pending' : ''}`,
    dataset: { id: m.id, msgId: m.msg_id, sentAt: m.sent_at, cliMsgId: m.cli_msg_id ?? '', key: m.key ?? '', state: m.local ?? m.delivery_state ?? '' },
  },
  h('div', { class: 'message-meta' },
    agent ? avatar(m.agent_user_id, m.agent_name) : null,
    h('span', { class: 'sender', dataset: { user: agent ? m.agent_user_id : '' } }, who), ' · ', timeEl(m.sent_at),
    quotable ? h('button', {
      type: 'button',
      class: 'ghost reply-action',
      title: 'Reply quoting this message',
      'aria-label': 'Reply quoting this message',
      onclick: () => timeline.composer.quote({ msg_id: m.msg_id, text: m.content ?? `[${m.msg_type ?? 'message'}]` }),
    }, '↩') : null),
  quoteBlock(m, timeline.list),
  h('div', { class: 'message-body' }, m.content ?? `[${m.msg_type ?? 'message'} without text]`),
  attachments ? h('div', { class: 'muted' }, `📎 ${attachments} attachment${attachments === 1 ? '' : 's'}`) : null,
  reactionsOf(m),
  m.direction === 'out' ? deliveryOf(m, timeline) : null);
  el.message = m;
  return el;
}

// Each state: what the message shows, and what a screen reader says.
const STATES = {
  sending: ['…', 'Sending'],
  waiting: ['Offline: sends when back online', 'Offline: it will be sent when the network is back'],
  queued: ['🕓', 'Queued'],
  sent: ['✓', 'Sent'],
  delivered: ['✓✓', 'Delivered'],
  seen: ['Seen', 'Seen'],
};

/** Where an outgoing message is: sending, queued, sent ✓, delivered ✓✓, seen; or why it was not
 * sent, with a retry. Messages sent outside agora have no state: nothing is shown. */
function deliveryOf(m, timeline) {
  const state = m.local ?? m.delivery_state;
  if (state === 'failed') {
    const reason = m.local ? m.local_reason : m.failure_reason ?? failureText(m.failure_class);
    const retry = m.local
      ? () => outbox.resend(outbox.get(m.key))
      : () => timeline.retry(m);
    return h('div', { class: 'delivery-failed' },
      h('span', { class: 'delivery', dataset: { state }, role: 'img', 'aria-label': `Not sent: ${reason}` }, '⚠ Not sent: ', h('span', { class: 'failure-reason' }, reason)),
      busyButton('Retry', retry, { class: 'retry' }));
  }
  const shown = STATES[state];
  if (!shown) return null;
  const [text, label] = shown;
  const times = [m.delivered_at && `delivered ${when(m.delivered_at)}`, m.seen_at && `seen ${when(m.seen_at)}`].filter(Boolean);
  return h('div', { class: 'delivery-line' },
    h('span', { class: 'delivery', dataset: { state }, role: 'img', 'aria-label': label, title: [label, ...times].join(' · ') }, text));
}

function failureText(failureClass) {
  return { retryable: 'the listener will try again', permanent: 'Zalo refused it', rate_limited: 'too many messages for now' }[failureClass] ?? 'the listener could not send it';
}

/** The reactions to a message, the latest of each person. */
function reactionsOf(m) {
  if (!m.reactions?.length) return null;
  return h('div', { class: 'reactions', 'aria-label': 'Reactions' },
    m.reactions.map((r) => h('span', {
      class: 'reaction',
      title: `${r.direction === 'out' ? 'You' : r.reactor_id} · ${when(r.reacted_at)}`,
    }, r.reaction)));
}

function quoteBlock(m, list) {
  if (!m.quote_msg_id && m.quote_payload == null && m.quote_preview == null) return null;
  // A reply agora sent has the quoted message's id only: its text is the shown message's.
  const quoted = m.quote_msg_id && list.querySelector(`[data-msg-id="${CSS.escape(m.quote_msg_id)}"] .message-body`);
  const text = quoteText(m.quote_preview) ?? quoteText(m.quote_payload) ?? quoted?.textContent ?? null;
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

