// Replies on their way to the gateway: each keeps the Idempotency-Key it was first sent with, so
// whatever happens to an answer (the network drops, the tab goes offline, the gateway is slow)
// the reply is sent again with that same key and the gateway answers the one order it stored:
// the customer gets it once. A reply stays here until the gateway acknowledged it (202: the
// order is stored); from then on its state comes from the server (the live stream, the timeline).
import { api, ApiError, explain, newKey } from './api.js';

// A send with no answer within this is taken as lost and sent again (same key).
const ANSWER_MS = 15_000;
const MAX_WAIT_MS = 15_000;

// key -> entry: {key, account, conversation, body, quoteText, createdAt,
//                status: 'sending' | 'waiting' (offline) | 'failed' | 'accepted', reason, order}
const entries = new Map();
const listeners = new Set();

/** Call `listener(entry)` on every change of a reply's status (returns the unsubscribe). */
export function onChange(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** The replies of a conversation the gateway has not acknowledged yet, oldest first. */
export function unacknowledged(account, conversation) {
  return [...entries.values()].filter(
    (e) => e.account === account && e.conversation === conversation && e.status !== 'accepted',
  );
}

/** Whether some reply of the conversation waits for its 202 (its cli_msg_id is not known). */
export function awaitingAnswer(account, conversation) {
  return unacknowledged(account, conversation).some((e) => e.status === 'sending');
}

export function get(key) {
  return entries.get(key);
}

/** Queue a reply: `body` is {content, quote_msg_id?}; `quoteText` what the reply shows quoted. */
export function send(account, conversation, body, quoteText = null) {
  const entry = {
    key: newKey(),
    account,
    conversation,
    body,
    quoteText,
    createdAt: new Date().toISOString(),
    status: 'sending',
    reason: null,
    order: null,
  };
  entries.set(entry.key, entry);
  deliver(entry);
  return entry;
}

/** Send a reply the gateway refused again, with its key (nothing was stored for it). */
export function resend(entry) {
  if (entry.status !== 'failed') return;
  deliver(entry);
}

function set(entry, status, reason = null) {
  entry.status = status;
  entry.reason = reason;
  for (const listener of listeners) {
    try {
      listener(entry);
    } catch (error) {
      console.error('a reply could not be shown', error);
    }
  }
}

function path(entry) {
  return `api/zalo-accounts/${entry.account}/conversations/${encodeURIComponent(entry.conversation)}/messages`;
}

/** Until the gateway answers: offline, wait for the network; no answer, or the gateway busy or
 * still working on the first try, send again (same key) after a wait; refused, failed. */
async function deliver(entry) {
  for (let attempt = 0; ; attempt += 1) {
    if (!navigator.onLine) {
      set(entry, 'waiting', 'Offline: it will be sent when the network is back.');
      await online();
    }
    set(entry, 'sending');
    let error;
    try {
      const reply = await api(path(entry), {
        method: 'POST', body: entry.body, idempotencyKey: entry.key, timeoutMs: ANSWER_MS,
      });
      entry.order = reply.data;
      entries.delete(entry.key);
      set(entry, 'accepted');
      return;
    } catch (caught) {
      error = caught;
    }
    if (!(error instanceof ApiError) || !retried(error)) {
      set(entry, 'failed', explain(error, `conversation ${entry.conversation}`));
      return;
    }
    if (error.status === 0 && !navigator.onLine) continue; // waits for the network above
    const waitMs = error.retryAfter ? error.retryAfter * 1000 : Math.min(500 * 2 ** attempt, MAX_WAIT_MS);
    await pause(waitMs);
  }
}

/** Answers after which the same request may be stored or soon be taken: sent again. */
function retried(error) {
  return error.status === 0 // no answer: it may have been stored
    || error.status === 408
    || error.status === 429
    || error.status === 503
    || (error.status === 409 && error.code === 'aborted'); // the first try is still running
}

function online() {
  return new Promise((resolve) => {
    window.addEventListener('online', resolve, { once: true });
  });
}

/** Wait `ms`, or less when the network comes back. */
function pause(ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      window.removeEventListener('online', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    window.addEventListener('online', done, { once: true });
  });
}
