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
