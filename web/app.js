// agora's web client: sign-in, the Zalo inbox and the course forum, on the public /api routes.
import { h, fill } from './js/dom.js';
import { forumView } from './js/forum.js';
import { inboxView, leaveInbox } from './js/inbox.js';
import { stopFollowing } from './js/live.js';
import { myName } from './js/people.js';
import { route, setRenderer, go } from './js/router.js';
import { session } from './js/session.js';
import { signInView } from './js/signin.js';
import { teamView } from './js/team.js';
import { clearNotice, closePopoversOnEscapeAndOutside, setTitle } from './js/ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const signOut = document.getElementById('sign-out');
let shownUser = session.userId;

closePopoversOnEscapeAndOutside();
// The skip link moves focus to the page's content (its href would be taken for a route).
document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

function header(section) {
  const signedIn = session.signedIn;
  nav.hidden = !signedIn;
  signOut.hidden = !signedIn;
  if (!signedIn) {
    who.replaceChildren();
    delete who.dataset.user;
    return;
  }
  who.dataset.user = String(session.userId);
  const accounts = session.accounts;
  const until = session.expiresAt;
  fill(who,
    h('strong', {}, myName()),
    h('span', { class: 'muted' },
      ` · ${accounts.length ? `Zalo ${accounts.length === 1 ? 'account' : 'accounts'} ${accounts.join(', ')}` : 'no Zalo account'}`,
      until ? ` · until ${until.toLocaleTimeString()}` : ''));
  for (const link of nav.querySelectorAll('a')) {
    if (link.dataset.section === section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

async function render(reason = null) {
  const [section, ...rest] = route();
  header(section);
  shownUser = session.userId;
  if (section !== 'inbox' || !session.signedIn) leaveInbox();
  if (!session.signedIn) {
    stopFollowing();
    setTitle('Sign in');
    await signInView(main, reason);
    return;
  }
  if (section === 'inbox') await inboxView(main, rest);
  else if (section === 'forum') await forumView(main, rest);
  else if (section === 'team') {
    stopFollowing();
    await teamView(main, rest);
  }
  else go(session.accounts.length ? '#/inbox' : '#/forum');
}

setRenderer(render);
window.addEventListener('hashchange', () => {
  clearNotice();
  render().catch(crashed);
});
session.onChange((reason, elsewhere) => {
  // Signed out (here or in another tab), or another tab signed in as someone else: the page
  // follows; the same user's new token only changes the header.
  if (!session.signedIn || (elsewhere && session.userId !== shownUser)) render(reason).catch(crashed);
  else header(route()[0]);
});
signOut.addEventListener('click', () => {
  session.signOut();
  history.replaceState(null, '', location.pathname);
});

function crashed(error) {
  console.error(error);
  fill(main, h('div', { class: 'error-panel', role: 'alert' }, `This page hit a bug: ${error.message}. Reload the page.`));
}

render().catch(crashed);
