// Shared bits of the page: the notice line, error panels, a two-step delete button.
import { explain } from './api.js';
import { h } from './dom.js';

let noticeTimer = null;

/** Say something at the top of the page (an error stays until closed, the rest 6 s). */
export function notify(text, kind = 'info') {
  const box = document.getElementById('notice');
  box.className = `notice ${kind}`;
  box.replaceChildren(
    h('span', {}, text),
    h('button', { type: 'button', class: 'ghost', 'aria-label': 'Close', onclick: () => (box.hidden = true) }, '×'),
  );
  box.hidden = false;
  clearTimeout(noticeTimer);
  if (kind !== 'error') noticeTimer = setTimeout(() => (box.hidden = true), 6000);
}

export function clearNotice() {
  document.getElementById('notice').hidden = true;
}

/** The tab's title: where you are, most specific first ("Hoa — Inbox — Zalo account 1 — agora"). */
export function setTitle(...parts) {
  document.title = [...parts.filter(Boolean), 'agora'].join(' — ');
}

/** A loading line that says what is coming (a status, so screen readers hear it). */
export function loading(text) {
  return h('p', { class: 'muted loading', role: 'status' }, text);
}

/**
 * Popovers (<details class="popover">: who liked, history, remove) close on Escape (focus back
 * on their summary) and on a click or tap outside them. Installed once, for the whole page.
 */
export function closePopoversOnEscapeAndOutside() {
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape') return;
    for (const box of document.querySelectorAll('details.popover[open]')) {
      const inside = box.contains(document.activeElement);
      box.open = false;
      if (inside) box.querySelector('summary')?.focus();
    }
  });
  document.addEventListener('click', (event) => {
    for (const box of document.querySelectorAll('details.popover[open]')) {
      if (!box.contains(event.target)) box.open = false;
    }
  });
}

/**
 * A list whose items are one Tab stop (roving tabindex): the arrow keys, Home and End move
 * between its links; the one with aria-current, else the last focused, else the first, is the
 * stop. Call `refresh()` after the list changed.
 */
export function rovingList(list, itemSelector) {
  const items = () => [...list.querySelectorAll(itemSelector)];
  let stop = null;
  const refresh = () => {
    const all = items();
    if (!all.includes(stop)) stop = all.find((el) => el.getAttribute('aria-current') === 'true') ?? all[0] ?? null;
    for (const el of all) el.tabIndex = el === stop ? 0 : -1;
  };
  list.addEventListener('focusin', (event) => {
    const el = event.target.closest(itemSelector);
    if (el && list.contains(el)) {
      stop = el;
      refresh();
    }
  });
  list.addEventListener('keydown', (event) => {
    const all = items();
    const at = all.indexOf(document.activeElement);
    if (at < 0) return;
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: all.length - 1 }[event.key];
    if (to == null || !all[Math.max(0, Math.min(all.length - 1, to))]) return;
    event.preventDefault();
    stop = all[Math.max(0, Math.min(all.length - 1, to))];
    refresh();
    stop.focus();
  });
  return { refresh, current: (el) => { stop = el; refresh(); } };
}

/** A panel explaining an error, in place of what could not be loaded. */
export function errorPanel(error, what = '') {
  return h('div', { class: 'error-panel', role: 'alert', dataset: { status: error.status ?? '' } }, explain(error, what));
}

/** A "Delete" button that asks once more before it calls `action`. */
export function deleteButton(label, action) {
  let armed = false;
  let timer = null;
  const button = h('button', { type: 'button', class: 'ghost danger', onclick: async () => {
    if (!armed) {
      armed = true;
      button.textContent = 'Really delete?';
      timer = setTimeout(() => {
        armed = false;
        button.textContent = label;
      }, 4000);
      return;
    }
    clearTimeout(timer);
    button.disabled = true;
    try {
      await action();
    } finally {
      button.disabled = false;
      armed = false;
      button.textContent = label;
    }
  } }, label);
  return button;
}

/** A button that shows it is busy while `action` runs (and cannot be pressed twice). */
export function busyButton(label, action, props = {}) {
  const button = h('button', { type: 'button', ...props, onclick: async () => {
    if (button.disabled) return;
    button.disabled = true;
    button.setAttribute('aria-busy', 'true');
    try {
      await action(button);
    } finally {
      button.disabled = false;
      button.removeAttribute('aria-busy');
    }
  } }, label);
  return button;
}
