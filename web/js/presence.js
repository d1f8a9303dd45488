// Who else is in a conversation: the account's presence (GET …/presence, then the stream's
// `presence` frames), one state per person and conversation until it expires; and this page's
// own presence in the open conversation (viewing every few seconds while it is open and the tab
// visible, typing at most every two seconds while keys are pressed, idle on leaving).
import { api, payload } from './api.js';
import { nameOf, remember, shortName } from './people.js';
import { session } from './session.js';

const VIEWING_EVERY_MS = 5000;
const TYPING_EVERY_MS = 2000;
// Keys stopped this long: typing is over, the person is still viewing.
const TYPING_ENDS_MS = 3000;

/** The account's presence: conversation key → Map(user id → {user, state, expires}). */
export class Presence {
  constructor(account, onChange) {
    this.account = account;
    this.onChange = onChange; // (conversation key) after its presence changed
    this.byKey = new Map();
    this.timers = new Map();
  }

  async load() {
    let reply;
    try {
      reply = await api(`api/zalo-accounts/${this.account}/presence`);
    } catch {
      return; // presence is a courtesy: the stream's frames still come
    }
    // The answer is the whole truth: what ended meanwhile (its idle missed) goes.
    const before = [...this.byKey.keys()];
    this.close();
    this.byKey.clear();
    for (const entry of payload(reply, 'presence')) this.take(entry);
    for (const key of before) if (!this.byKey.has(key)) this.onChange(key);
  }

  /** A presence frame (or an entry of the initial read): set, or ended by `idle`. */
  take(entry) {
    const key = entry?.conversation_key;
    const user = entry?.user;
    if (!key || user?.user_id == null || user.user_id === session.userId) return;
    remember(user.user_id, user.name);
    const people = this.byKey.get(key) ?? new Map();
    const expires = Date.parse(entry.expires_at);
    const timerKey = `${key}\u0000${user.user_id}`;
    clearTimeout(this.timers.get(timerKey));
    if (entry.state === 'idle' || !(expires > Date.now())) {
      people.delete(user.user_id);
    } else {
      people.set(user.user_id, { user, state: entry.state, expires });
      // Its end is known in advance; a lost idle frame must not leave someone "viewing".
      this.timers.set(timerKey, setTimeout(() => this.take({ ...entry, state: 'idle' }), Math.min(expires - Date.now(), 2 ** 31 - 1)));
    }
    if (people.size) this.byKey.set(key, people);
    else this.byKey.delete(key);
    this.onChange(key);
  }

  /** The others in conversation `key`, typing ones first. */
  others(key) {
    const people = [...(this.byKey.get(key)?.values() ?? [])];
    return people.sort((a, b) => (a.state === 'typing' ? 0 : 1) - (b.state === 'typing' ? 0 : 1));
  }

  /** One line for a conversation: "Lan is typing…", "Nam is viewing", "Lan and Nam are viewing". */
  line(key) {
    const people = this.others(key);
    const typing = people.filter((p) => p.state === 'typing');
    const viewing = people.filter((p) => p.state !== 'typing');
    const names = (list) => list.map((p) => shortName(p.user.user_id, p.user.name));
    const join = (list) => (list.length <= 2 ? list.join(' and ') : `${list.slice(0, -1).join(', ')} and ${list[list.length - 1]}`);
    const parts = [];
    if (typing.length) parts.push(`${join(names(typing))} ${typing.length === 1 ? 'is' : 'are'} typing…`);
    if (viewing.length) parts.push(`${join(names(viewing))} ${viewing.length === 1 ? 'is' : 'are'} viewing`);
    return { text: parts.join(' · '), title: people.map((p) => `${nameOf(p.user.user_id, p.user.name)}: ${p.state}`).join(', ') };
  }

  close() {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}

/** This page's presence in one open conversation. */
export class Beacon {
  constructor(account, key) {
    this.key = key;
    this.url = `api/zalo-accounts/${account}/conversations/${encodeURIComponent(key)}/presence`;
    this.state = null;
    this.lastTyping = 0;
    this.closed = false;
    this.ticker = setInterval(() => this.visible() && this.put('viewing'), VIEWING_EVERY_MS);
    this.typingEnds = null;
    this.onVisibility = () => (this.visible() ? this.put('viewing') : this.put('idle'));
    this.onLeave = () => this.put('idle', { keepalive: true });
    document.addEventListener('visibilitychange', this.onVisibility);
    window.addEventListener('pagehide', this.onLeave);
    if (this.visible()) this.put('viewing');
  }

  visible() {
    return document.visibilityState === 'visible';
  }

  /** A key pressed in the composer: typing (at most every 2 s), viewing again once keys stop. */
  typed() {
    if (this.closed || !this.visible()) return;
    const now = Date.now();
    if (now - this.lastTyping >= TYPING_EVERY_MS || this.state !== 'typing') {
      this.lastTyping = now;
      this.put('typing');
    }
    clearTimeout(this.typingEnds);
    this.typingEnds = setTimeout(() => this.visible() && this.put('viewing'), TYPING_ENDS_MS);
  }

  /** The reply went: typing is over. */
  sent() {
    clearTimeout(this.typingEnds);
    if (this.visible()) this.put('viewing');
  }

  put(state, { keepalive = false } = {}) {
    if (this.closed && state !== 'idle') return;
    if (state === 'idle' && this.state === 'idle') return;
    this.state = state;
    api(this.url, { method: 'PUT', body: { state }, keepalive }).catch(() => {});
  }

  /** The conversation is left: idle at once (not after the state's time to live). */
  close() {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.ticker);
    clearTimeout(this.typingEnds);
    document.removeEventListener('visibilitychange', this.onVisibility);
    window.removeEventListener('pagehide', this.onLeave);
    this.put('idle');
  }
}
