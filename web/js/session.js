// The bearer token and what it claims, kept in localStorage with its expiry: every tab of this
// origin shares it for the token's life (a `storage` event tells the other tabs of a sign-in or
// a sign-out), and an expired one is dropped when read.

const KEY = 'agora.token';
const EXPIRES = 'agora.token.expires'; // ms since the epoch; absent: the token names no `exp`

/** The claims of a JWT, decoded (not verified: the gateway verifies every request). */
export function decode(token) {
  const parts = String(token).trim().split('.');
  if (parts.length !== 3) throw new Error('a JWT has three parts separated by dots');
  let json;
  try {
    const b64 = parts[1].replace(/-/g, '+').replace(/_/g, '/');
    const bytes = Uint8Array.from(atob(b64.padEnd(Math.ceil(b64.length / 4) * 4, '=')), (c) =>
      c.charCodeAt(0),
    );
    json = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new Error('its middle part is not base64url-encoded JSON');
  }
  if (json === null || typeof json !== 'object') throw new Error('its claims are not an object');
  return json;
}

class Session {
  constructor() {
    this.listeners = new Set();
    this.timer = null;
    // Another tab signed in or out: this one follows.
    window.addEventListener('storage', (event) => {
      if (event.key === KEY || event.key === null) this.changed(null, true);
    });
    // A token kept by an earlier visit: its expiry timer starts now.
    if (this.token) this.arm();
  }

  get token() {
    const token = localStorage.getItem(KEY);
    if (!token) return null;
    const expires = Number(localStorage.getItem(EXPIRES) || 0);
    if (expires && expires <= Date.now()) {
      localStorage.removeItem(KEY);
      localStorage.removeItem(EXPIRES);
      return null;
    }
    return token;
  }

  get claims() {
    const token = this.token;
    if (!token) return null;
    try {
      return decode(token);
    } catch {
      return null;
    }
  }

  get userId() {
    const sub = this.claims?.sub;
    return sub == null ? null : Number(sub);
  }

  /** The Zalo accounts the token grants, sorted. */
  get accounts() {
    const accounts = this.claims?.accounts;
    return Array.isArray(accounts) ? [...accounts].map(Number).sort((a, b) => a - b) : [];
  }

  get expiresAt() {
    const exp = this.claims?.exp;
    return typeof exp === 'number' ? new Date(exp * 1000) : null;
  }

  get signedIn() {
    const expires = this.expiresAt;
    return Boolean(this.claims) && (!expires || expires > new Date());
  }

  /** Keep `token` for this tab; throws (with a reason a person can act on) if it is no JWT. */
  signIn(token) {
    const claims = decode(token);
    if (claims.sub == null) throw new Error('it names no user (no "sub" claim)');
    if (typeof claims.exp === 'number' && claims.exp * 1000 <= Date.now()) {
      throw new Error(`it expired at ${new Date(claims.exp * 1000).toLocaleString()}`);
    }
    localStorage.setItem(KEY, String(token).trim());
    if (typeof claims.exp === 'number') localStorage.setItem(EXPIRES, String(claims.exp * 1000));
    else localStorage.removeItem(EXPIRES);
    this.changed(null);
  }

  signOut(reason = null) {
    localStorage.removeItem(KEY);
    localStorage.removeItem(EXPIRES);
    this.changed(reason);
  }

  onChange(listener) {
    this.listeners.add(listener);
  }

  /** Sign out when the token expires. */
  arm() {
    clearTimeout(this.timer);
    const expires = this.expiresAt;
    if (expires) {
      // setTimeout's limit is ~24.8 days; a dev token lives an hour, any token here ≤ 24 h.
      const ms = Math.min(expires - Date.now(), 2 ** 31 - 1);
      this.timer = setTimeout(() => this.signOut('Your sign-in expired: sign in again.'), ms);
    }
  }

  /** `elsewhere`: the change came from another tab. */
  changed(reason, elsewhere = false) {
    this.arm();
    for (const listener of this.listeners) listener(reason, elsewhere);
  }
}

export const session = new Session();
