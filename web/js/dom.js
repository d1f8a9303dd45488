// Building DOM without HTML strings: text is always text (no markup from the API ever runs).

/** h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child) */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value == null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (typeof value === 'boolean' || key === 'value') el[key] = value;
    else el.setAttribute(key, String(value));
  }
  add(el, children);
  return el;
}

export function add(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Replace everything inside `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });

export function when(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : dateTime.format(date);
}

export function clock(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : timeOnly.format(date);
}

/** A <time> element: the local time as text, the exact instant as its datetime. */
export function timeEl(iso, format = when) {
  return h('time', { datetime: iso, title: iso }, format(iso));
}

/** "1 comment", "2 comments" */
export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}
