// The public HTTP API (/api/...): one fetch wrapper, and errors a person can read.
import { session } from './session.js';

export class ApiError extends Error {
  constructor(status, code, message, fields = [], retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.fields = fields;
    this.retryAfter = retryAfter;
  }
}

/**
 * Call `path` (relative: 'api/courses/42/posts') with the session's token.
 * Resolves to the parsed JSON body; rejects with an ApiError built from the API's error shape
 * {"success": false, "error": {"code", "message", "fields"}}.
 */
export async function api(path, { method = 'GET', query = null, body, idempotencyKey = null, timeoutMs = null, keepalive = false } = {}) {
  const url = new URL(path, document.baseURI);
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value != null) url.searchParams.set(name, String(value));
  }
  const headers = { Accept: 'application/json' };
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
      // A last word as the page goes (presence's idle) outlives the page.
      keepalive,
      // No answer within timeoutMs counts as none at all (a keyed write is then sent again).
      signal: timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined,
    });
  } catch {
    throw new ApiError(0, 'network', 'the gateway did not answer');
  }
  let text;
  try {
    text = await response.text();
  } catch {
    throw new ApiError(0, 'network', 'the answer did not arrive whole');
  }
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok || data?.success === false) {
    const error = data?.error ?? {};
    const retry = response.headers.get('Retry-After');
    const failure = new ApiError(
      response.status,
      error.code ?? 'error',
      error.message ?? response.statusText,
      Array.isArray(error.fields) ? error.fields : [],
      retry == null ? null : Number(retry),
    );
    if (response.status === 401 && session.token && url.pathname.includes('/api/')) {
      session.signOut(`${explain(failure)}`);
    }
    throw failure;
  }
  return data;
}

/** What an answer carries: its `data` when it is wrapped in the gateway's envelope
 * ({"success": true, "data": …}), else the answer itself; `field`: one list of it. */
export function payload(reply, field = null) {
  const body = reply && typeof reply === 'object' && 'data' in reply && !('pagination' in reply) ? reply.data : reply;
  if (field == null) return body;
  return body?.[field] ?? reply?.[field] ?? [];
}

/** A new random key: a UUID where the browser makes one (a secure context), else 128 random
 * bits in hex. */
export function newKey() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The Idempotency-Key of one thing a form creates: the same key for every try of the same
 * content (a retry after a timeout, a second click after an error), a new one once the content
 * changed or the create succeeded. The gateway then creates it once, however often it is sent.
 */
export class CreateKey {
  #key = null;
  #content = null;

  for(content) {
    const text = JSON.stringify(content);
    if (this.#key === null || text !== this.#content) {
      this.#key = newKey();
      this.#content = text;
    }
    return this.#key;
  }

  done() {
    this.#key = null;
    this.#content = null;
  }
}

const CREATE_TRIES = 3;

/**
 * POST a create with its Idempotency-Key, tried again (same key) when no answer came back (the
 * request may have been stored), while the service is briefly unavailable, or while the same
 * create is still being processed: the gateway answers a retry with the first response, so the
 * thing is created once.
 */
export async function create(path, body, key) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await api(path, { method: 'POST', body, idempotencyKey: key.for(body) });
    } catch (error) {
      const again = error instanceof ApiError
        && (error.status === 0 || error.status === 503 || (error.status === 409 && error.code === 'aborted'));
      if (!again || attempt >= CREATE_TRIES) throw error;
      const waitMs = error.retryAfter ? error.retryAfter * 1000 : 300 * 2 ** attempt;
      await new Promise((resolve) => { setTimeout(resolve, waitMs); });
    }
  }
}

const FIELD_NAMES = {
  title: 'Title',
  body: 'Text',
  parent_id: 'The comment you reply to',
  limit: 'Page size',
  before_id: 'Page cursor',
  after_id: 'Page cursor',
  before_sent_at: 'Page cursor',
  conversation_key: 'Conversation',
  content: 'Reply',
  quote_msg_id: 'The quoted message',
  q: 'Search',
  cursor: 'Search results page',
  around: 'The message to open',
  after_sent_at: 'Page cursor',
};

function seconds(value) {
  return value && Number.isFinite(value) ? `${value} s` : 'a moment';
}

/**
 * What went wrong, as a sentence; `what` names the thing asked for ("course 99", "this post").
 */
export function explain(error, what = '') {
  if (!(error instanceof ApiError)) return `Something went wrong in this page: ${error.message}`;
  const said = error.message ? ` (the server said: ${error.message})` : '';
  switch (error.status) {
    case 0:
      return navigator.onLine === false
        ? 'You are offline. Check your connection; this works again once you are back online.'
        : 'The server cannot be reached right now. Check your connection and try again in a moment.';
    case 400:
      return `The request was malformed${said}.`;
    case 401:
      return `You are not signed in, or your token is no longer accepted${said}. Sign in again.`;
    case 403:
      return `You do not have access${what ? ` to ${what}` : ''}${said}.`;
    case 404:
      return `${what ? capitalize(what) : 'This'} was not found: it may have been deleted, or it belongs elsewhere${said}.`;
    case 408:
      return 'The request took too long to arrive. Try again.';
    case 409:
      return `That conflicts with the current state${said}. Reload and try again.`;
    case 413:
      return 'That is too large to send.';
    case 422: {
      if (!error.fields.length) return `Please check what you entered${said}.`;
      const list = error.fields.map((f) => `${FIELD_NAMES[f.field] ?? f.field}: ${f.message}`);
      return `Please check what you entered — ${list.join('; ')}.`;
    }
    case 429:
      return `Too many actions in a short time: wait ${seconds(error.retryAfter)} and try again.`;
    case 503:
      return `The service is busy or briefly unavailable: try again in ${seconds(error.retryAfter)}.`;
    default:
      return `The server failed (HTTP ${error.status}${error.message ? `: ${error.message}` : ''}). Try again later.`;
  }
}

function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

let devProbe = null;

/** Whether this gateway offers the development sign-in (GET dev/token answers). */
export function devGateway() {
  devProbe ??= api('dev/token').then(
    (reply) => reply.data,
    () => null,
  );
  return devProbe;
}
