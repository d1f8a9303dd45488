// Sign-in: paste a bearer token, or (development gateway only) pick a demo person by name.
import { api, explain, ApiError } from './api.js';
import { h, fill } from './dom.js';
import { avatar, remember } from './people.js';
import { go } from './router.js';
import { session } from './session.js';

export async function signInView(main, reason) {
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const fail = (text) => {
    error.textContent = text;
    error.hidden = false;
  };
  const demo = h('section', { class: 'card', 'aria-labelledby': 'demo-title' },
    h('h2', { id: 'demo-title' }, 'Demo users'),
    h('p', { class: 'muted' }, 'Checking whether this gateway offers development sign-in…'));
  const tokenBox = h('textarea', {
    id: 'token', rows: 5, spellcheck: 'false', autocomplete: 'off',
    placeholder: 'eyJhbGciOiJIUzI1NiIsImtpZCI6…',
  });
  const pasted = h('form', { class: 'card', onsubmit: (event) => {
    event.preventDefault();
    try {
      session.signIn(tokenBox.value);
      enter();
    } catch (e) {
      fail(`That token cannot be used: ${e.message}.`);
    }
  } },
  h('h2', {}, 'Paste a token'),
  h('label', { for: 'token' }, 'Bearer token (JWT)'),
  tokenBox,
  h('p', { class: 'muted' }, 'On the local stack, ', h('code', {}, 'make token SUB=7 ACCOUNTS=1,2'), ' prints one.'),
  h('button', { type: 'submit' }, 'Sign in'));

  fill(main,
    h('div', { class: 'signin' },
      h('h1', {}, 'Sign in'),
      reason ? h('p', { class: 'error-panel', role: 'alert' }, reason) : null,
      error,
      h('div', { class: 'signin-grid' }, demo, pasted)));

  try {
    const reply = await api('dev/token');
    const users = reply.data.demo_users;
    fill(demo,
      h('h2', { id: 'demo-title' }, 'Demo users'),
      h('p', { class: 'muted' }, `Development gateway: a token valid ${Math.round(reply.data.ttl_seconds / 60)} minutes, signed by the gateway.`),
      h('ul', { class: 'demo-users' }, users.map((user) => h('li', {},
        h('button', { type: 'button', class: 'demo-user', dataset: { sub: user.sub }, onclick: async (event) => {
          const button = event.currentTarget;
          button.disabled = true;
          try {
            const minted = await api('dev/token', { method: 'POST', body: { sub: user.sub, accounts: user.accounts } });
            session.signIn(minted.data.token);
            remember(user.sub, user.name);
            enter();
          } catch (e) {
            fail(`Demo sign-in failed. ${explain(e)}`);
          } finally {
            button.disabled = false;
          }
        } },
        avatar(user.sub, user.name ?? null, { title: false }),
        h('span', { class: 'demo-user-text' },
          h('strong', {}, user.name ?? `User ${user.sub}`),
          h('span', { class: 'demo-user-role' }, user.role ?? user.label ?? '')))))));
  } catch (e) {
    const off = e instanceof ApiError && e.status === 404;
    fill(demo,
      h('h2', { id: 'demo-title' }, 'Demo users'),
      h('p', { class: 'muted' }, off
        ? 'Not offered here: demo sign-in exists only when the gateway runs with its development settings (JWT_DEV_MODE=true and an HS256 key). Paste a token instead.'
        : `Demo sign-in is unavailable. ${explain(e)}`));
  }
}

function enter() {
  go(session.accounts.length ? '#/inbox' : '#/forum');
}
