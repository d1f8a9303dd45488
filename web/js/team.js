// The team of a Zalo account: its agents (who may be assigned, who owns it), its canned replies,
// and — for its owners — the screens that manage both; and the account's audit of the team's
// changes. Read once per account and page, read again after a change made here.
import { api, explain, payload } from './api.js';
import { fill, h, timeEl } from './dom.js';
import { avatar, nameOf, rememberAll } from './people.js';
import { go } from './router.js';
import { session } from './session.js';
import { busyButton, deleteButton, errorPanel, loading, notify, setTitle } from './ui.js';

const rosters = new Map(); // account → Promise<{agents, error}>
const canned = new Map(); // account → Promise<[canned reply]>

/** The account's agents ({user_id, name, initials, role}), owners first; [] when they cannot
 * be read (the inbox works without them: no assignee picker then). */
export function roster(account, { fresh = false } = {}) {
  if (fresh || !rosters.has(account)) {
    rosters.set(account, api(`api/zalo-accounts/${account}/agents`).then(
      (reply) => {
        const agents = payload(reply, 'agents');
        rememberAll(agents);
        return { agents, error: null };
      },
      (error) => {
        rosters.delete(account); // tried again next time
        return { agents: [], error };
      },
    ));
  }
  return rosters.get(account);
}

/** Whether the signed-in person owns the account (the server decides; this only shows controls). */
export function isOwner(agents) {
  return agents.some((a) => a.user_id === session.userId && a.role === 'owner');
}

/** The account's canned replies, by shortcut. */
export function cannedReplies(account, { fresh = false } = {}) {
  if (fresh || !canned.has(account)) {
    canned.set(account, api(`api/zalo-accounts/${account}/canned-replies`).then(
      (reply) => {
        const list = payload(reply, 'canned_replies');
        rememberAll(list.map((c) => c.updated_by));
        return list;
      },
      () => {
        canned.delete(account);
        return [];
      },
    ));
  }
  return canned.get(account);
}

/** A canned reply's text with its placeholders filled. */
export function fillPlaceholders(body, { contactName, agentName }) {
  return body
    .replaceAll('{{contact_name}}', contactName ?? '')
    .replaceAll('{{agent_name}}', agentName ?? '');
}

const TABS = [
  ['agents', 'Agents'],
  ['canned', 'Canned replies'],
  ['audit', 'Audit'],
];

/** #/team/<account>/<tab>: the account's agents, canned replies and audit. */
export async function teamView(main, [accountPart, tab = 'agents']) {
  const account = Number(accountPart || session.accounts[0]);
  const label = TABS.find(([id]) => id === tab)?.[1] ?? 'Agents';
  setTitle(label, `Team — Zalo account ${account}`);
  const body = h('div', { class: 'team-body' }, loading('Loading the team…'));
  fill(main, h('div', { class: 'team card' },
    h('p', {}, h('a', { href: `#/inbox/${account}` }, '← Inbox')),
    h('h1', {}, `Team — Zalo account ${account}`),
    h('nav', { class: 'tabs', 'aria-label': 'Team' }, TABS.map(([id, text]) => h('a', {
      href: `#/team/${account}/${id}`,
      'aria-current': id === tab ? 'page' : null,
    }, text))),
    body));
  const { agents, error } = await roster(account, { fresh: true });
  if (error) {
    fill(body, errorPanel(error, `the team of Zalo account ${account}`));
    return;
  }
  const owner = isOwner(agents);
  if (tab === 'canned') await cannedScreen(body, account, owner);
  else if (tab === 'audit') await auditScreen(body, account);
  else agentsScreen(body, account, agents, owner);
}

function agentsScreen(body, account, agents, owner) {
  const rows = agents.map((agent) => {
    const role = h('select', { class: 'agent-role', 'aria-label': `Role of ${nameOf(agent.user_id, agent.name)}`, disabled: !owner },
      h('option', { value: 'agent', selected: agent.role === 'agent' }, 'Agent'),
      h('option', { value: 'owner', selected: agent.role === 'owner' }, 'Owner'));
    role.addEventListener('change', async () => {
      try {
        await api(`api/zalo-accounts/${account}/agents/${agent.user_id}`, { method: 'PUT', body: { role: role.value } });
        notify(`${nameOf(agent.user_id, agent.name)} is now ${role.value === 'owner' ? 'an owner' : 'an agent'}.`);
      } catch (error) {
        role.value = agent.role;
        notify(explain(error, 'this agent'), 'error');
        return;
      }
      go(`#/team/${account}/agents`);
    });
    return h('li', { class: 'agent', dataset: { user: agent.user_id } },
      avatar(agent.user_id, agent.name),
      h('span', { class: 'agent-name' }, nameOf(agent.user_id, agent.name), agent.user_id === session.userId ? h('span', { class: 'muted' }, ' (you)') : null),
      owner ? role : h('span', { class: 'muted' }, agent.role === 'owner' ? 'Owner' : 'Agent'),
      owner ? deleteButton('Remove', async () => {
        try {
          await api(`api/zalo-accounts/${account}/agents/${agent.user_id}`, { method: 'DELETE' });
        } catch (error) {
          notify(explain(error, 'this agent'), 'error');
          return;
        }
        notify(`${nameOf(agent.user_id, agent.name)} is no longer an agent of this account.`);
        go(`#/team/${account}/agents`);
      }) : null);
  });
  let add = null;
  if (owner) {
    const id = h('input', { id: 'agent-add-id', type: 'number', min: 1, required: true, inputmode: 'numeric' });
    const role = h('select', { id: 'agent-add-role' }, h('option', { value: 'agent' }, 'Agent'), h('option', { value: 'owner' }, 'Owner'));
    add = h('form', { class: 'agent-add', onsubmit: async (event) => {
      event.preventDefault();
      try {
        await api(`api/zalo-accounts/${account}/agents/${Number(id.value)}`, { method: 'PUT', body: { role: role.value } });
      } catch (error) {
        notify(explain(error, `user ${id.value}`), 'error');
        return;
      }
      go(`#/team/${account}/agents`);
    } },
    h('h2', {}, 'Add an agent'),
    h('label', { for: 'agent-add-id' }, 'User id'), id,
    h('label', { for: 'agent-add-role' }, 'Role'), role,
    h('button', { type: 'submit' }, 'Add'));
  }
  fill(body,
    h('h2', {}, 'Agents'),
    owner ? null : h('p', { class: 'muted' }, 'Only an owner of the account changes its agents.'),
    h('ul', { class: 'agents' }, rows),
    add);
}

async function cannedScreen(body, account, owner) {
  const list = await cannedReplies(account, { fresh: true });
  const editor = (item = null) => {
    const shortcut = h('input', { class: 'canned-shortcut', required: true, maxlength: 32, pattern: '[a-z0-9_\\-]{1,32}', value: item?.shortcut ?? '', 'aria-label': 'Shortcut (a–z, 0–9, _ and -)', placeholder: 'shortcut' });
    const text = h('textarea', { class: 'canned-body', required: true, maxlength: 2000, rows: 3, 'aria-label': 'Text', placeholder: 'Chào {{contact_name}}, …' });
    text.value = item?.body ?? '';
    return h('form', { class: 'canned-form', onsubmit: async (event) => {
      event.preventDefault();
      const url = `api/zalo-accounts/${account}/canned-replies${item ? `/${item.id}` : ''}`;
      try {
        await api(url, { method: item ? 'PUT' : 'POST', body: { shortcut: shortcut.value, body: text.value } });
      } catch (error) {
        notify(explain(error, 'this canned reply'), 'error');
        return;
      }
      notify(item ? 'Canned reply saved.' : 'Canned reply added.');
      await cannedScreen(body, account, owner);
    } }, shortcut, text, h('button', { type: 'submit' }, item ? 'Save' : 'Add'));
  };
  const rows = list.map((item) => h('li', { class: 'canned', dataset: { id: item.id } },
    h('div', {}, h('strong', {}, `/${item.shortcut}`), ' ',
      h('span', { class: 'muted' }, 'by ', nameOf(item.updated_by?.user_id, item.updated_by?.name), ' · ', timeEl(item.updated_at))),
    h('div', { class: 'canned-text' }, item.body),
    owner ? h('div', { class: 'actions' },
      h('details', { class: 'popover' }, h('summary', {}, 'Edit'), editor(item)),
      deleteButton('Delete', async () => {
        try {
          await api(`api/zalo-accounts/${account}/canned-replies/${item.id}`, { method: 'DELETE' });
        } catch (error) {
          notify(explain(error, 'this canned reply'), 'error');
          return;
        }
        await cannedScreen(body, account, owner);
      })) : null));
  fill(body,
    h('h2', {}, 'Canned replies'),
    h('p', { class: 'muted' }, 'Type / at the start of a reply to pick one. {{contact_name}} and {{agent_name}} are filled in.'),
    rows.length ? h('ul', { class: 'canned-list' }, rows) : h('p', { class: 'muted' }, 'No canned reply yet.'),
    owner ? h('section', {}, h('h2', {}, 'New canned reply'), editor()) : h('p', { class: 'muted' }, 'Only an owner of the account changes them.'));
}

const ACTIONS = {
  'agent.added': (e) => `added ${who(e.subject)} to the team`,
  'agent.role_changed': (e) => `made ${who(e.subject)} ${e.detail?.role === 'owner' ? 'an owner' : 'an agent'}`,
  'agent.removed': (e) => `removed ${who(e.subject)} from the team`,
  'conversation.assigned': (e) => `assigned ${e.conversation_key} to ${who(e.subject)}`,
  'conversation.unassigned': (e) => `unassigned ${e.conversation_key}`,
  'conversation.status_changed': (e) => `set ${e.conversation_key} ${e.detail?.status ?? 'changed'}`,
  'canned_reply.created': (e) => `added the canned reply /${e.detail?.shortcut ?? ''}`,
  'canned_reply.updated': (e) => `changed the canned reply /${e.detail?.shortcut ?? ''}`,
  'canned_reply.deleted': (e) => `deleted the canned reply /${e.detail?.shortcut ?? ''}`,
};

function who(person) {
  return person ? nameOf(person.user_id, person.name) : 'someone';
}

async function auditScreen(body, account) {
  const list = h('ol', { class: 'audit-list' });
  const more = h('div', { class: 'list-more' });
  fill(body, h('h2', {}, 'Audit'), list, more);
  const page = async (before) => {
    let reply;
    try {
      reply = await api(`api/zalo-accounts/${account}/audit`, { query: { limit: 50, before_id: before } });
    } catch (error) {
      fill(more, errorPanel(error, 'the audit'));
      return;
    }
    for (const entry of reply.data) {
      const say = ACTIONS[entry.action] ?? ((e) => e.action);
      list.append(h('li', { dataset: { id: entry.id, action: entry.action } },
        avatar(entry.actor?.user_id, entry.actor?.name), ' ',
        h('strong', {}, who(entry.actor)), ` ${say(entry)} · `, timeEl(entry.at)));
    }
    if (!list.children.length) list.append(h('li', { class: 'muted' }, 'Nothing yet.'));
    const p = reply.pagination;
    fill(more, p.has_more ? busyButton('Older', () => page(p.next_before_id), { class: 'ghost wide' }) : null);
  };
  await page(null);
}
