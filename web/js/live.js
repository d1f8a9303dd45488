// Live updates: the gateway's Server-Sent Events of an inbox or a course, one stream at a time.
// Read with fetch, not EventSource, so the token travels in the Authorization header (never in a
// URL); the SSE framing is parsed here. A dropped stream resumes with Last-Event-ID, so what was
// missed arrives next, once; the header's #live badge says when the page is not live.
import { explain, ApiError } from './api.js';
import { session } from './session.js';

// The gateway sends a comment at least every 15 s: this long without a byte means a dead link.
const SILENCE_MS = 40_000;
const MAX_WAIT_MS = 30_000;

let current = null;

/**
 * Follow the stream at `path` ('api/courses/42/events'), calling onEvent(kind, data) for each
 * event, in order. The same path keeps its open stream (only the handler changes); another path
 * closes it first. Resolves once the first attempt to connect has an answer, so a view can read
 * its lists after the stream started and miss nothing in between.
 */
export function follow(path, onEvent) {
  if (current?.path !== path || current.ended) {
    current?.close();
    current = new LiveStream(path);
  }
  current.onEvent = onEvent;
  return current.opened;
}

export function stopFollowing() {
  current?.close();
  current = null;
}

class LiveStream {
  constructor(path) {
    this.path = path;
    this.onEvent = () => {};
    this.lastId = null; // the position of the last event handled: where a resume starts
    this.retryMs = 2000; // until the stream's `retry:` says otherwise
    this.failures = 0;
    this.connectedOnce = false;
    this.closed = false;
    this.ended = false; // refused for good (401, 403, 404): following the path again retries
    this.controller = null;
    this.wake = null;
    this.opened = new Promise((resolve) => (this.markOpened = resolve));
    // The browser knows first when the network goes: an open response may not notice for long.
    this.onOffline = () => this.controller?.abort();
    this.onOnline = () => this.wake?.();
    window.addEventListener('offline', this.onOffline);
    window.addEventListener('online', this.onOnline);
    this.run();
  }

  close() {
    this.closed = true;
    this.controller?.abort();
    this.wake?.();
    window.removeEventListener('offline', this.onOffline);
    window.removeEventListener('online', this.onOnline);
    badge(null);
  }

  async run() {
    while (!this.closed) {
      badge(this.connectedOnce ? 'reconnecting' : 'connecting');
      let wait;
      try {
        wait = await this.connect();
      } catch {
        wait = null; // the network failed, or the stream was cut: try again
      }
      this.markOpened();
      if (this.closed || wait === false) break;
      badge('reconnecting');
      // The server's retry hint, doubled after each attempt in a row that failed.
      const delay = wait ?? Math.min(this.retryMs * 2 ** this.failures, MAX_WAIT_MS);
      this.failures += 1;
      await this.pause(delay);
    }
    this.ended = true;
  }

  /** One connection, read to its end. Returns how long to wait before the next (null: the
   * usual backoff), or false when this stream must not be retried. */
  async connect() {
    const controller = (this.controller = new AbortController());
    const headers = { Accept: 'text/event-stream', Authorization: `Bearer ${session.token}` };
    if (this.lastId != null) headers['Last-Event-ID'] = this.lastId;
    const response = await fetch(new URL(this.path, document.baseURI), {
      headers, signal: controller.signal, cache: 'no-store', credentials: 'omit',
    });
    if (!response.ok) return this.refused(response);
    const resumed = this.lastId != null;
    this.failures = 0;
    this.markOpened();
    badge('live');
    if (this.connectedOnce && !resumed) {
      // The gateway opens every stream with its start position (an id-only event), so this is
      // a stream cut before even that: it starts from now, and what it missed is in the lists.
      this.deliver('reset', { reason: 'reconnected without a position' });
    }
    // Back after a cut: what a resumed stream does not replay (presence: no position) is read
    // again by the view.
    if (this.connectedOnce) this.deliver('reconnected', { resumed });
    this.connectedOnce = true;
    await this.read(response.body, controller);
    return null;
  }

  async refused(response) {
    const error = await apiError(response);
    if (response.status === 401) {
      session.signOut(explain(error));
      return false;
    }
    if (response.status === 422 && this.lastId != null) {
      // The position is no longer understood: start over from now and refetch.
      this.lastId = null;
      this.deliver('reset', { reason: error.message });
      return 0;
    }
    if (response.status === 403 || response.status === 404) {
      // Not this user's to watch: the view shows why (its own request got the same answer).
      badge('off', explain(error));
      return false;
    }
    return error.retryAfter != null ? error.retryAfter * 1000 : null;
  }

  async read(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let event = { type: '', data: [], id: null };
    let silence = null;
    try {
      for (;;) {
        clearTimeout(silence);
        silence = setTimeout(() => controller.abort(), SILENCE_MS);
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        // A CR at the end may be the first half of a CRLF: keep it for the next chunk.
        const end = buffer.endsWith('\r') ? buffer.length - 1 : buffer.length;
        const lines = buffer.slice(0, end).split(/\r\n|\r|\n/);
        buffer = lines.pop() + buffer.slice(end);
        for (const line of lines) {
          if (line === '') {
            if (event.id != null) this.lastId = event.id;
            if (event.data.length) this.deliver(event.type || 'message', parse(event.data.join('\n')));
            event = { type: '', data: [], id: null };
          } else if (!line.startsWith(':')) { // a comment (': ping') only keeps the link alive
            this.field(event, line);
          }
        }
      }
    } finally {
      clearTimeout(silence);
      reader.cancel().catch(() => {});
    }
  }

  field(event, line) {
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'data') event.data.push(value);
    else if (name === 'event') event.type = value;
    else if (name === 'id' && !value.includes('\0')) event.id = value;
    else if (name === 'retry' && /^[0-9]+$/.test(value)) this.retryMs = Number(value);
  }

  deliver(kind, data) {
    if (this.closed || data === undefined) return;
    try {
      this.onEvent(kind, data);
    } catch (error) {
      console.error('a live event could not be shown', kind, data, error);
    }
  }

  /** Wait `ms`, or less when the browser says the network is back. */
  pause(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }
}

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    console.error('a live event that is not JSON', text);
    return undefined;
  }
}

async function apiError(response) {
  let error = {};
  try {
    error = (await response.json())?.error ?? {};
  } catch {
    // no JSON body: the status says enough
  }
  const retry = response.headers.get('Retry-After');
  return new ApiError(response.status, error.code ?? 'error', error.message ?? response.statusText,
    [], retry == null ? null : Number(retry));
}

/** The header's badge: live, connecting, reconnecting…, off (with why), or hidden (null). */
function badge(state, why = '') {
  const el = document.getElementById('live');
  if (!el) return;
  el.hidden = state == null;
  el.dataset.state = state ?? '';
  el.textContent = { live: '● live', connecting: 'connecting…', reconnecting: 'reconnecting…', off: 'not live' }[state] ?? '';
  el.title = state === 'off' ? why : state === 'live' ? 'Changes appear as they happen' : 'The live updates are down: trying again';
}

/**
 * Hold a view's events while it (re)reads its lists, then apply them on top in order: a list
 * read may be older than an event that arrived during it. `apply(kind, data)` must tolerate
 * repeats (the feeds deliver at least once; views dedupe by id and keep the newer state).
 */
export function gate(apply) {
  const held = [];
  let holds = 0;
  return {
    take(kind, data) {
      if (holds) held.push([kind, data]);
      else apply(kind, data);
    },
    /** Hold events until `reading` settles (reads may overlap: the last one releases). */
    async during(reading) {
      holds += 1;
      try {
        return await reading();
      } finally {
        holds -= 1;
        while (!holds && held.length) apply(...held.shift());
      }
    },
  };
}
