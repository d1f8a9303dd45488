// People by name: the API names each person beside their id (agent_name, author_name, name…), but
// a live event may carry no name. The names this page has read are kept for the session (id →
// name), so a person once named is named everywhere; "user N" only for someone never named.
import { h } from './dom.js';
import { session } from './session.js';

const names = new Map();
let owner = null; // the user these names were read as: another sign-in starts afresh

function cache() {
  if (owner !== session.userId) {
    names.clear();
    owner = session.userId;
  }
  return names;
}

/** Keep what the API said of `id` (a null or empty name teaches nothing). */
export function remember(id, name) {
  if (id == null || !name) return;
  cache().set(Number(id), String(name));
}

/** Keep the people of API objects: `person` objects ({user_id, name}) or [id, name] pairs. */
export function rememberAll(pairs) {
  for (const pair of pairs) {
    if (Array.isArray(pair)) remember(...pair);
    else if (pair) remember(pair.user_id, pair.name);
  }
}

/** A person's name: the one given, else the one known, else "user N". */
export function nameOf(id, name = null) {
  if (name) {
    remember(id, name);
    return name;
  }
  if (id == null) return 'someone';
  const known = cache().get(Number(id)) ?? (Number(id) === session.userId ? session.claims?.name : null);
  return known || `user ${id}`;
}

/** Whether the page knows `id`'s name. */
export function known(id) {
  return id != null && (cache().has(Number(id)) || (Number(id) === session.userId && Boolean(session.claims?.name)));
}

/** The signed-in person's name ("User 7" until their name is known). */
export function myName() {
  const id = session.userId;
  if (id == null) return '';
  return known(id) ? nameOf(id) : `User ${id}`;
}

/** A Vietnamese name's given name is its last word ("Nguyễn Thị Lan" → "Lan"): how a
 * colleague is called in a short line. A fallback "user N" stays whole. */
export function shortName(id, name = null) {
  const full = nameOf(id, name);
  if (!known(id) && !name) return full;
  const words = full.trim().split(/\s+/);
  return words[words.length - 1] || full;
}

/** Initials for an avatar: the first and the last word's first letters ("Nguyễn Thị Lan" →
 * "NL", as the directory makes them); "#N" for someone unnamed. */
export function initialsOf(id, name = null) {
  if (!name && !known(id)) return id == null ? '?' : `#${id}`.slice(0, 4);
  const words = nameOf(id, name).trim().split(/\s+/).filter(Boolean);
  const first = words[0]?.[0] ?? '';
  const last = words.length > 1 ? words[words.length - 1][0] : '';
  return (first + last).toLocaleUpperCase('vi');
}

/** A round initials avatar, its colour from the id; decorative (the name is beside it or in
 * its title). */
export function avatar(id, name = null, { title = true } = {}) {
  const hue = ((Number(id) || 0) * 47) % 360;
  return h('span', {
    class: `avatar hue-${Math.floor(hue / 30)}`,
    'aria-hidden': 'true',
    title: title ? nameOf(id, name) : null,
    dataset: { user: id ?? '' },
  }, initialsOf(id, name));
}
