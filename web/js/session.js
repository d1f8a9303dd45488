// The bearer token of this tab (sessionStorage: gone when the tab closes) and what it claims.

const KEY = 'agora.token';

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
  }

  get token() {
    return sessionStorage.getItem(KEY);
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
    sessionStorage.setItem(KEY, String(token).trim());
    this.changed(null);
  }

  signOut(reason = null) {
    sessionStorage.removeItem(KEY);
    this.changed(reason);
  }

  onChange(listener) {
    this.listeners.add(listener);
  }

  changed(reason) {
    clearTimeout(this.timer);
    const expires = this.expiresAt;
    if (expires) {
      // setTimeout's limit is ~24.8 days; a dev token lives an hour, any token here ≤ 24 h.
      const ms = Math.min(expires - Date.now(), 2 ** 31 - 1);
      this.timer = setTimeout(() => this.signOut('Your token expired: sign in again.'), ms);
    }
    for (const listener of this.listeners) listener(reason);
  }
}

export const session = new Session();
