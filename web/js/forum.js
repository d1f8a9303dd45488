// The course forum: a course's feed, a post with its comments and two-level replies, writing,
// editing and deleting your own (a teacher edits and removes anyone's, with a reason, and reads
// the moderation log), earlier texts of what was edited, and likes that answer at once and then settle on the server's state; live
// from the course's event stream (new posts and comments appear, deleted ones go, counts move).
// The feed searches the course's posts and comments; a comment found opens its post at it
// (#/forum/<course>/posts/<post>/comments/<comment>).
import { api, create, CreateKey, explain } from './api.js';
import { fill, h, plural, timeEl, when } from './dom.js';
import { follow, gate, stopFollowing } from './live.js';
import { renderMarkdown } from './markdown.js';
import { avatar, nameOf } from './people.js';
import { go } from './router.js';
import { SearchBox, showFound, snippetEl } from './search.js';
import { session } from './session.js';
import { busyButton, deleteButton, errorPanel, loading, notify, setTitle } from './ui.js';

const POSTS_PER_PAGE = 10;
const COMMENTS_PER_PAGE = 10;
const REPLIES_PER_PAGE = 10;
const COURSES_PER_PAGE = 50;
const LIKERS_PER_PAGE = 20;
const MODERATION_PER_PAGE = 20;
const REVISIONS_PER_PAGE = 20;

// Whether the signed-in user teaches the course on screen (from GET /api/courses): a teacher
// gets Remove on other members' posts and comments, and the moderation log. The server decides;
// this only shows the controls that can work.
let teaching = false;

export async function forumView(main, [coursePart, section, postPart, below, commentPart]) {
  const course = /^[1-9][0-9]{0,18}$/.test(coursePart ?? '') ? coursePart : null;
  const body = h('div', { class: 'forum-body' });
  // What was on screen goes at once: nothing old is left up looking current while this loads.
  main.setAttribute('aria-busy', 'true');
  fill(main, h('div', { class: 'forum' },
    loading(course ? `Loading course ${course}…` : 'Loading your courses…')));
  setTitle(course ? `Course ${course}` : null, 'Course forum');
  const picker = await coursePicker(course);
  main.removeAttribute('aria-busy');
  teaching = course != null && picker.roles.get(course) === 'teacher';
  fill(main, h('div', { class: 'forum' }, picker, body));
  if (!course) {
    stopFollowing();
    fill(body, h('h1', {}, 'Course forum'), h('p', { class: 'muted' }, 'Open a course to read its forum.'));
    return;
  }
  if (picker.titles.get(course)) setTitle(picker.titles.get(course), 'Course forum');
  const shown = section === 'posts' && /^[1-9][0-9]*$/.test(postPart ?? '')
    ? new PostPage(body, course, postPart, picker.titles.get(course),
      below === 'comments' && /^[1-9][0-9]*$/.test(commentPart ?? '') ? Number(commentPart) : null)
    : new FeedPage(body, course, picker.titles.get(course));
  // Held while the page reads, applied on top after; a reset reads the page's lists again.
  const live = gate((kind, data) => {
    if (kind === 'reset') live.during(() => shown.reload());
    else shown.onEvent(kind, data, live);
  });
  // The stream first, then the lists: whatever commits after the read is in the stream.
  await follow(`api/courses/${course}/events`, (kind, data) => live.take(kind, data));
  await live.during(() => shown.load());
}

/** What the stream says about counts, applied once per comment however often it is delivered:
 * a new comment adds one to its post; a deleted root takes itself and its replies, a reply one. */
class CommentTally {
  constructor() {
    this.applied = new Map(); // comment id -> 'created' | 'deleted'
  }

  /** How much the post's comment_count moves for `comment` (0 when already counted). */
  delta(comment, deleted = comment.deleted_at != null) {
    const state = deleted ? 'deleted' : 'created';
    const before = this.applied.get(comment.id);
    if (before === state || before === 'deleted') return 0;
    this.applied.set(comment.id, state);
    if (!deleted) return 1;
    return comment.parent_id == null ? -1 - comment.reply_count : -1;
  }
}

/**
 * A `changed` event: a post or comment whose text is not in the stream (too large for it, or
 * edited or removed since that entry was written). Read it (held like a list read, so that the
 * events after it apply on top), then `apply(item)`: the object as it is now, or null once it is
 * gone.
 */
function withheld(course, data, gated, apply) {
  return gated.during(async () => {
    let item = null;
    try {
      item = (await api(data.href.replace(/^\//, ''))).data;
    } catch (error) {
      if (error.status !== 404) {
        notify(explain(error, `course ${course}`), 'error');
        return;
      }
    }
    apply(item);
  });
}

/** A comment or post that reached this reader by the stream was just written: not liked yet. */
function fresh(item) {
  return { ...item, liked_by_me: item.liked_by_me ?? false };
}

// --- the course ---------------------------------------------------------------------------------

async function coursePicker(course) {
  const input = h('input', {
    id: 'course', type: 'text', inputmode: 'numeric', pattern: '[1-9][0-9]*', required: true,
    value: course ?? '', placeholder: 'e.g. 42', autocomplete: 'off',
  });
  const mine = new MyCourses(course);
  await mine.load();
  const picker = h('div', { class: 'course-picker' },
    mine.nav,
    h('form', { class: 'course-open', onsubmit: (event) => {
      event.preventDefault();
      const id = input.value.trim();
      if (!/^[1-9][0-9]{0,18}$/.test(id)) {
        notify('A course id is a positive whole number, e.g. 42.', 'error');
        return;
      }
      go(`#/forum/${id}`);
    } },
    h('label', { for: 'course' }, 'Course id'),
    input,
    h('button', { type: 'submit', class: 'ghost' }, 'Open')));
  picker.titles = mine.titles;
  picker.roles = mine.roles;
  return picker;
}

/** The courses the signed-in user belongs to (GET /api/courses), a page at a time. */
class MyCourses {
  constructor(current) {
    this.current = current;
    this.list = h('ul', { class: 'my-courses', 'aria-label': 'Your courses' });
    this.more = h('span', { class: 'list-more' });
    this.cursor = null;
    this.titles = new Map(); // course id -> its title
    this.roles = new Map(); // course id -> the user's role in it
    this.nav = h('nav', { class: 'my-courses-nav', 'aria-label': 'Your courses' },
      h('h2', { class: 'visually-hidden' }, 'Your courses'), this.list, this.more);
  }

  async load() {
    let page;
    try {
      page = await api('api/courses', { query: { limit: COURSES_PER_PAGE, after_id: this.cursor } });
    } catch (error) {
      fill(this.more, h('span', { class: 'muted', role: 'status' }, `Your courses could not be listed: ${explain(error, 'your courses')}`));
      return;
    }
    for (const course of page.data) this.list.append(this.item(course));
    if (!this.list.children.length) {
      this.list.append(h('li', { class: 'muted' }, 'You are not in any course yet.'));
    }
    this.cursor = page.pagination.has_more ? page.pagination.next_after_id : null;
    fill(this.more, this.cursor ? busyButton('More courses', () => this.load(), { class: 'ghost' }) : null);
  }

  item(course) {
    const id = String(course.course_id);
    if (course.title) this.titles.set(id, course.title);
    this.roles.set(id, course.role);
    return h('li', {},
      h('a', { href: `#/forum/${id}`, class: 'chip', 'aria-current': id === this.current ? 'page' : null, dataset: { course: id, role: course.role } },
        course.title || `Course ${id}`,
        h('span', { class: `role role-${course.role}` }, course.role)));
  }
}

function courseError(error, course) {
  if (error.status === 403) {
    return h('div', { class: 'error-panel', role: 'alert', dataset: { status: 403 } },
      h('strong', {}, `You are not enrolled in course ${course}. `),
      'Only its teacher and students can read and write in its forum. ',
      h('span', { class: 'muted' }, `(HTTP 403: ${error.message})`));
  }
  return errorPanel(error, `course ${course}`);
}

/** A person by name ("you" for the reader); `name` as the API gave it, else the one known. */
function who(userId, name = null) {
  if (userId === session.userId) {
    nameOf(userId, name); // kept for the live events that name no one
    return 'you';
  }
  return nameOf(userId, name);
}

/** Delete for the author; for a teacher of the course, Remove on another member's post or
 * comment, with an optional reason that goes to the moderation log. `remove(reason)` acts. */
function deleteControl(kind, item, remove, replies = () => 0) {
  if (item.user_id === session.userId) return deleteButton('Delete', () => remove(null));
  if (!teaching) return null;
  const reason = h('input', {
    type: 'text', maxlength: 500, class: 'moderate-reason',
    placeholder: 'Reason (optional, kept in the moderation log)', 'aria-label': `Reason for removing this ${kind}`,
  });
  // What goes with it, counted when the panel opens (replies arrive meanwhile).
  const note = h('p', { class: 'moderate-note', hidden: true });
  const button = busyButton(`Remove this ${kind}`, () => remove(reason.value.trim() || null), { class: 'danger moderate-remove' });
  const box = h('details', { class: 'moderate popover' }, h('summary', {}, 'Remove'),
    h('div', { class: 'moderate-panel' }, note, reason, button));
  box.addEventListener('toggle', () => {
    const n = replies();
    note.hidden = !n;
    note.textContent = n ? `Its ${plural(n, 'reply', 'replies')} will be removed with it; the ${kind} stays as "Removed by a teacher".` : '';
    button.textContent = n ? `Remove this ${kind} and ${plural(n, 'reply', 'replies')}` : `Remove this ${kind}`;
  });
  return box;
}

/** Where a comment a teacher removed was: who removed it (in its title) and why. */
function removedNote(comment) {
  const by = comment.removed_by;
  const reason = comment.removal_reason;
  return h('div', {
    class: 'comment-removed',
    title: [by ? `Removed by ${nameOf(by.user_id, by.name)}` : null, comment.removed_at ? when(comment.removed_at) : null].filter(Boolean).join(' · ') || null,
  }, reason ? `Removed by a teacher: ${reason}` : 'Removed by a teacher.');
}

/** Who may edit `item` and read its earlier texts: its author (the server also holds them to the
 * edit window) and the course's teachers. */
function mayEdit(item) {
  return item.user_id === session.userId || teaching;
}

/** "· edited <when>" and, for those who may read them, its earlier texts on demand. */
function editedMark(course, kind, item) {
  if (item.edited_at == null) return null;
  const mark = h('span', { class: 'edited' }, ' · edited ', timeEl(item.edited_at));
  if (!mayEdit(item)) return mark;
  return h('span', {}, mark, ' ', history(course, kind, item));
}

/** A post's or comment's earlier texts (GET …/revisions), newest first, read on every opening. */
function history(course, kind, item) {
  return pagedDetails({
    boxClass: 'revisions',
    summary: 'History',
    listClass: 'revisions-list',
    panelClass: 'revisions-panel',
    label: `Earlier texts of this ${kind}`,
    what: `the history of this ${kind}`,
    empty: 'No earlier texts.',
    more: 'Older',
    read: (cursor) => api(`api/courses/${course}/${kind}s/${item.id}/revisions`, { query: { limit: REVISIONS_PER_PAGE, before_id: cursor } }),
    next: (p) => (p.has_more ? p.next_before_id : null),
    row: (revision) => h('li', { class: 'revision', dataset: { id: revision.id } },
      h('div', { class: 'meta muted' }, 'written ', timeEl(revision.written_at), ' · replaced ', timeEl(revision.replaced_at), ` by ${who(revision.replaced_by)}`),
      revision.title != null ? h('strong', { class: 'revision-title' }, revision.title) : null,
      h('div', { class: 'revision-body markdown' }, renderMarkdown(revision.body))),
  });
}

/** An Edit button that puts a form in `slot` with the text as it is; `save(fields)` sends it
 * (PATCH) and resolves to the item as the server stored it. */
function editButton(kind, item, slot, save) {
  return h('button', { type: 'button', class: 'ghost small edit-button', onclick: () => {
    if (slot.firstChild) {
      slot.replaceChildren();
      return;
    }
    const title = kind === 'post'
      ? h('input', { class: 'edit-title', maxlength: 200, required: true, value: item.title, 'aria-label': 'Title' })
      : null;
    const text = h('textarea', { class: 'edit-body', rows: 4, maxlength: 20000, required: true, 'aria-label': `Text of this ${kind}` });
    text.value = item.body;
    const reason = item.user_id !== session.userId
      ? h('input', { class: 'edit-reason', maxlength: 500, placeholder: 'Reason (optional, kept in the moderation log)', 'aria-label': 'Reason for the edit' })
      : null;
    const submit = h('button', { type: 'submit' }, 'Save');
    const form = h('form', { class: 'composer edit-form', onsubmit: async (event) => {
      event.preventDefault();
      submit.disabled = true;
      try {
        const fields = { body: text.value };
        if (title) fields.title = title.value;
        if (reason?.value.trim()) fields.reason = reason.value.trim();
        await save(fields);
        slot.replaceChildren();
        notify(item.user_id === session.userId ? 'Saved.' : 'Saved; the edit is in the moderation log.');
      } catch (error) {
        notify(explain(error, `this ${kind}`), 'error');
      } finally {
        submit.disabled = false;
      }
    } }, title, text, reason,
    h('div', { class: 'actions' }, submit,
      h('button', { type: 'button', class: 'ghost', onclick: () => slot.replaceChildren() }, 'Cancel')));
    fill(slot, form);
    text.focus();
  } }, 'Edit');
}

/** The course's moderation log (GET …/moderation), newest first, for its teachers. */
function moderationLog(course) {
  return pagedDetails({
    boxClass: 'moderation-log card',
    summary: 'Moderation log',
    listClass: 'moderation-list',
    label: 'Moderation log',
    what: 'the moderation log',
    empty: 'Nothing moderated yet.',
    more: 'Older',
    read: (cursor) => api(`api/courses/${course}/moderation`, { query: { limit: MODERATION_PER_PAGE, before_id: cursor } }),
    next: (p) => (p.has_more ? p.next_before_id : null),
    row: (action) => {
      const what = action.comment_id != null ? `comment ${action.comment_id} on post ${action.post_id}` : `post ${action.post_id}`;
      const verb = action.action === 'delete' ? 'removed' : 'edited';
      return h('li', { dataset: { id: action.id, action: action.action } },
        h('strong', {}, who(action.moderator_id, action.moderator_name)), ` ${verb} ${who(action.author_id, action.author_name)}'s ${what} · `, timeEl(action.created_at),
        action.reason ? h('div', { class: 'moderation-reason' }, `Reason: ${action.reason}`) : null);
    },
  });
}

/**
 * A <details> whose list is read each time it opens (what it lists keeps changing) and pages on
 * with a button: `read(cursor)` answers a page of the API (cursor null: the first), `row(entry)`
 * makes an entry's <li>, `next(pagination)` the cursor of the page after (null: none).
 */
function pagedDetails({ boxClass, summary, listClass, panelClass = null, label, what, empty, more: moreLabel, read, row, next, adjust = null }) {
  const list = h('ol', { class: listClass, 'aria-label': label });
  const more = h('div', { class: 'list-more' });
  // With a panel it floats over the page: a popover (Escape or a click outside closes it).
  const box = h('details', { class: panelClass ? `${boxClass} popover` : boxClass }, h('summary', {}, summary),
    ...(panelClass ? [h('div', { class: panelClass }, list, more)] : [list, more]));
  let cursor = null;

  async function load(reading = null) {
    let page;
    try {
      page = await (reading ?? read(cursor));
    } catch (error) {
      list.querySelector('.loading')?.remove();
      fill(more, h('span', { class: 'muted', role: 'status' }, explain(error, what)));
      return;
    }
    list.querySelector('.loading')?.remove();
    for (const entry of page.data) {
      const li = row(entry);
      if (li) list.append(li);
    }
    adjust?.(list);
    if (!list.children.length) list.append(h('li', { class: 'muted' }, empty));
    cursor = next(page.pagination);
    fill(more, cursor ? busyButton(moreLabel, load, { class: 'ghost small' }) : null);
  }

  box.addEventListener('toggle', () => {
    if (!box.open) return;
    box.reload();
  });
  box.clear = () => {
    list.replaceChildren();
    fill(more);
  };
  /** Read from the first page again (opened, or open while what it lists changed). */
  box.reload = () => {
    list.replaceChildren(h('li', { class: 'muted loading', role: 'status' }, 'Loading…'));
    cursor = null;
    return load(read(null));
  };
  return box;
}

// --- the feed -------------------------------------------------------------------------------------

class FeedPage {
  constructor(body, course, title) {
    this.body = body;
    this.course = course;
    this.heading = title
      ? h('h1', {}, title, ' ', h('span', { class: 'muted course-id' }, `course ${course}`))
      : h('h1', {}, `Course ${course}`);
    this.list = h('ol', { class: 'feed', 'aria-label': `Posts of course ${course}` },
      h('li', { class: 'muted loading', role: 'status' }, 'Loading posts…'));
    this.more = h('div', { class: 'list-more' });
    this.cards = new Map(); // post id -> its card
    this.gone = new Set(); // deleted post ids: a repeat of their creation must not bring them back
    this.tally = new CommentTally();
    this.cursor = null;
    const composer = postComposer(course, (post) => this.place(post, true));
    const search = new SearchBox({
      id: 'forum-search',
      path: `api/courses/${course}/search`,
      label: 'Search this course',
      placeholder: 'Search posts and comments',
      what: `course ${course}`,
      item: (hit) => courseHit(course, hit),
    });
    fill(body, this.heading, search.el, teaching ? moderationLog(course) : null, composer, this.list, this.more);
  }

  async load() {
    let page;
    try {
      page = await api(`api/courses/${this.course}/posts`, { query: { limit: POSTS_PER_PAGE, before_id: this.cursor } });
    } catch (error) {
      this.list.querySelector('.loading')?.remove();
      if (this.cursor == null) fill(this.body, this.heading, courseError(error, this.course));
      else notify(explain(error, `course ${this.course}`), 'error');
      return;
    }
    this.list.querySelector('.loading')?.remove();
    for (const post of page.data) this.place(post);
    if (!this.cards.size) fill(this.list, h('li', { class: 'muted empty-feed' }, 'No posts yet: write the first one.'));
    this.cursor = page.pagination.has_more ? page.pagination.next_before_id : null;
    fill(this.more, this.cursor ? busyButton('Older posts', () => this.load(), { class: 'ghost wide' }) : this.cards.size ? h('p', { class: 'muted center' }, 'That is every post.') : null);
  }

  /** The feed from its first page again (after a reset); what is being written stays. */
  async reload() {
    this.list.replaceChildren();
    this.cards.clear();
    this.tally = new CommentTally();
    this.cursor = null;
    await this.load();
  }

  /** A post in its place (newest first), once; one older than the loaded pages waits for them. */
  place(post, mine = false) {
    if (this.cards.has(post.id) || this.gone.has(post.id)) return;
    const next = [...this.list.children].find((li) => li.post?.id < post.id) ?? null;
    if (!next && this.cursor != null && !mine) return;
    this.list.querySelector('.empty-feed')?.remove();
    const card = postCard(this.course, post, { onDeleted: () => this.remove(post.id) });
    const li = h('li', {}, card);
    li.post = post;
    this.cards.set(post.id, card);
    this.list.insertBefore(li, next);
  }

  remove(postId) {
    this.gone.add(postId);
    this.cards.get(postId)?.closest('li').remove();
    this.cards.delete(postId);
  }

  onEvent(kind, data, gated) {
    if (kind === 'post') {
      if (data.deleted_at != null) this.remove(data.id);
      else if (this.cards.has(data.id)) this.cards.get(data.id).update(data);
      else this.place(fresh(data));
    } else if (kind === 'comment') {
      // An edit moves no count; a creation or a removal once each.
      if (data.deleted_at != null || data.version <= 1) {
        this.cards.get(data.post_id)?.commentCount(this.tally.delta(data));
      }
    } else if (kind === 'likes' && data.target.kind === 'post') {
      this.cards.get(data.target.id)?.likeCount(data.like_count);
    } else if (kind === 'changed') {
      return withheld(this.course, data, gated, (item) => {
        if (data.kind === 'post') {
          if (item) this.onEvent('post', item, gated);
          else this.remove(data.post_id);
        } else if (data.version <= 1) {
          // A comment's creation: it counts, even if it is gone since (its removal follows).
          this.cards.get(data.post_id)?.commentCount(this.tally.delta({ id: data.comment_id, parent_id: data.parent_id }));
        }
      });
    }
    return null;
  }
}

/** A post or a comment found: the post's title (a comment's: "Comment on …"), who and when,
 * the snippet; it opens the post (at the comment). */
function courseHit(course, hit) {
  const post = hit.post;
  const item = hit.comment ?? post;
  const href = hit.comment
    ? `#/forum/${course}/posts/${post.id}/comments/${hit.comment.id}`
    : `#/forum/${course}/posts/${post.id}`;
  return {
    href,
    children: [
      h('span', { class: 'search-hit-head' },
        h('strong', { class: 'search-hit-name' }, hit.comment ? `Comment on “${post.title}”` : post.title), ' ',
        h('span', { class: 'muted' }, `${who(item.user_id, item.author_name)} · `, timeEl(item.created_at))),
      h('span', { class: 'search-hit-text' }, snippetEl(hit.match)),
    ],
  };
}

function postComposer(course, created) {
  const title = h('input', { id: 'post-title', maxlength: 200, required: true, placeholder: 'Title' });
  const text = h('textarea', { id: 'post-body', rows: 3, maxlength: 20000, required: true, placeholder: 'Write something for the course… (Tiếng Việt, emoji 👍 welcome)' });
  const submit = h('button', { type: 'submit' }, 'Post');
  const key = new CreateKey();
  const form = h('form', { class: 'card composer', onsubmit: async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      const reply = await create(`api/courses/${course}/posts`, { title: title.value, body: text.value }, key);
      key.done();
      form.reset();
      created(reply.data);
      notify('Posted.');
    } catch (error) {
      notify(explain(error, `course ${course}`), 'error');
    } finally {
      submit.disabled = false;
    }
  } },
  h('details', {}, h('summary', {}, 'Write a post'),
    h('label', { for: 'post-title' }, 'Title'), title,
    h('label', { for: 'post-body' }, 'Text'), text, submit));
  return form;
}

function postCard(course, post, { full = false, onDeleted }) {
  const link = `#/forum/${course}/posts/${post.id}`;
  const titleEl = h(full ? 'h1' : 'h2', { class: 'post-title' });
  const meta = h('div', { class: 'meta muted' });
  const bodyEl = h('div', { class: 'post-body markdown' });
  const paintText = () => {
    fill(titleEl, full ? post.title : h('a', { href: link }, post.title));
    fill(meta, avatar(post.user_id, post.author_name), ` by ${who(post.user_id, post.author_name)} · `, timeEl(post.created_at), editedMark(course, 'post', post));
    fill(bodyEl, renderMarkdown(full || post.body.length <= 300 ? post.body : `${post.body.slice(0, 300)}…`));
  };
  paintText();
  const editSlot = h('div', { class: 'form-slot' });
  const card = h('article', { class: `post${full ? ' full' : ''}`, dataset: { id: post.id } }, titleEl, meta, bodyEl, editSlot);
  const comments = h('a', { href: link, class: 'comment-count' }, `💬 ${plural(post.comment_count, 'comment')}`);
  card.append(h('div', { class: 'actions' },
    likeButton(course, 'post', post),
    likers(course, 'post', post),
    comments,
    mayEdit(post) ? editButton('post', post, editSlot, async (fields) => {
      const reply = await api(`api/courses/${course}/posts/${post.id}`, { method: 'PATCH', body: fields });
      card.update(reply.data);
    }) : null,
    deleteControl('post', post, async (reason) => {
      try {
        await api(`api/courses/${course}/posts/${post.id}`, { method: 'DELETE', query: { reason } });
        notify(post.user_id === session.userId ? 'Post deleted.' : 'Post removed.');
        onDeleted(card);
      } catch (error) {
        notify(explain(error, 'this post'), 'error');
      }
    })));
  const like = card.querySelector('.like');
  card.commentCount = (delta) => {
    post.comment_count = Math.max(0, post.comment_count + delta);
    comments.textContent = `💬 ${plural(post.comment_count, 'comment')}`;
  };
  card.likeCount = (n) => like.setCount(n);
  /** The server's counts and text for this post (a post event, a refetch, an edit's answer);
   * the reader's like stays. */
  card.update = (latest) => {
    card.commentCount(latest.comment_count - post.comment_count);
    card.likeCount(latest.like_count);
    // Only a newer version: a late event (a relay, a repeat) never brings an older text back.
    if (latest.version > post.version) {
      const { title, body, edited_at, version } = latest;
      Object.assign(post, { title, body, edited_at, version });
      paintText();
    }
  };
  return card;
}

// --- likes ----------------------------------------------------------------------------------------

/** ♥ n: flips at once; the answer decides (liked, and the count moves only if it changed); a
 * refusal (429 too fast, 404 gone, 403) puts it back and says why. */
function likeButton(course, kind, item) {
  const count = h('span', { class: 'like-count' });
  const heart = h('span', { class: 'heart', 'aria-hidden': 'true' });
  // Its name is what it shows, and says more to a screen reader: "Like 3 likes".
  const verb = h('span', { class: 'visually-hidden' });
  const noun = h('span', { class: 'visually-hidden' });
  const button = h('button', { type: 'button', class: 'like ghost', onclick: toggle }, heart, verb, count, noun);
  let busy = false;

  function paint() {
    const liked = item.liked_by_me === true;
    heart.textContent = liked ? '♥' : '♡';
    count.textContent = String(item.like_count);
    button.setAttribute('aria-pressed', String(liked));
    button.dataset.liked = String(liked);
    button.dataset.count = String(item.like_count);
    button.title = item.liked_by_me == null ? 'Like (your like state is unknown right now)' : liked ? 'Unlike' : 'Like';
    verb.textContent = `${liked ? 'Unlike' : 'Like'} `;
    noun.textContent = ` like${item.like_count === 1 ? '' : 's'}`;
  }

  async function toggle() {
    if (busy) return;
    busy = true;
    button.setAttribute('aria-busy', 'true');
    const before = item.liked_by_me === true;
    const like = !before;
    // A step, not a value: a count the stream brings meanwhile is kept, and the step undone.
    const step = like ? 1 : -1;
    item.liked_by_me = like;
    item.like_count = Math.max(0, item.like_count + step);
    paint();
    try {
      const reply = await api(`api/courses/${course}/${kind}s/${item.id}/like`, { method: 'POST', body: { like } });
      item.liked_by_me = reply.liked;
      // Unchanged: the server already was in that state, which the shown count included.
      if (!reply.changed || reply.liked !== like) item.like_count = Math.max(0, item.like_count - step);
    } catch (error) {
      item.liked_by_me = before;
      item.like_count = Math.max(0, item.like_count - step);
      notify(likeRefused(error, kind, like), 'error');
    } finally {
      busy = false;
      button.removeAttribute('aria-busy');
      paint();
      // "Who liked" beside it: read again if open, else emptied (it reads when next opened), so
      // it never shows the like as it was.
      const box = button.parentElement?.querySelector(':scope > details.likers');
      if (box?.open) box.reload();
      else box?.clear();
    }
  }

  /** The stored count from the stream (the flusher's, after a like of anyone's). */
  button.setCount = (n) => {
    item.like_count = n;
    paint();
  };
  paint();
  return button;
}

/** "Who liked": the members who liked a post or a comment, newest first, read when opened. A
 * like just given shows once the server stored it (a moment later in the buffered mode). */
function likers(course, kind, item) {
  return pagedDetails({
    boxClass: 'likers',
    summary: 'Who liked',
    listClass: 'likers-list',
    panelClass: 'likers-panel',
    label: `Who liked this ${kind}`,
    what: `the likes of this ${kind}`,
    empty: 'Nobody yet.',
    more: 'More',
    read: (cursor) => api(`api/courses/${course}/${kind}s/${item.id}/likes`, {
      query: { limit: LIKERS_PER_PAGE, before_liked_at: cursor?.[0], before_user_id: cursor?.[1] },
    }),
    next: (p) => (p.has_more ? [p.next_before_liked_at, p.next_before_user_id] : null),
    // The reader's own like as their heart shows it, even before the server stored the change
    // (likes are applied a moment later): an unlike takes "you" off, a like puts "you" on top.
    row: (liker) => (liker.user_id === session.userId && item.liked_by_me === false
      ? null
      : likerRow(liker.user_id, timeEl(liker.liked_at), liker.name)),
    adjust: (list) => {
      if (item.liked_by_me !== true || list.querySelector(`[data-user="${session.userId}"]`)) return;
      list.querySelector('li.muted:not(.loading)')?.remove();
      list.prepend(likerRow(session.userId, 'just now'));
    },
  });
}

function likerRow(userId, at, name = null) {
  return h('li', { dataset: { user: userId } }, h('strong', {}, who(userId, name)), ' · ', at);
}

function likeRefused(error, kind, like) {
  const undone = `Your ${like ? 'like' : 'unlike'} was undone.`;
  if (error.status === 429) {
    const wait = error.retryAfter ? `${error.retryAfter} s` : 'a moment';
    return `Too many likes in a minute (60 at most): wait ${wait} and try again. ${undone}`;
  }
  if (error.status === 404) return `This ${kind} no longer exists (deleted?), so it cannot be liked. ${undone}`;
  return `${explain(error, `this ${kind}`)} ${undone}`;
}

// --- a post and its comments ----------------------------------------------------------------------

class PostPage {
  constructor(body, course, postId, courseTitle, commentId = null) {
    // The course by its title when the member's list has it (a bare number names nothing).
    const name = courseTitle || `Course ${course}`;
    Object.assign(this, { body, course, courseName: name, postId: Number(postId), thread: null, commentId });
    this.back = h('a', { href: `#/forum/${course}`, class: 'back' }, `← ${name}`);
    fill(body, this.back, loading('Loading the post…'));
  }

  async load() {
    let post;
    try {
      post = (await api(`api/courses/${this.course}/posts/${this.postId}`)).data;
    } catch (error) {
      fill(this.body, this.back, error.status === 403 ? courseError(error, this.course) : errorPanel(error, `post ${this.postId} of course ${this.course}`));
      return;
    }
    setTitle(post.title, this.courseName, 'Course forum');
    const card = postCard(this.course, post, { full: true, onDeleted: () => go(`#/forum/${this.course}`) });
    this.thread = new Thread(this.course, post, card);
    fill(this.body, this.back, card, this.thread.section);
    await this.thread.loadComments();
    if (this.commentId != null) await this.thread.reveal(this.commentId);
  }

  /** After a reset: the post's counts, and its comments from the first page (the comment being
   * written stays). */
  async reload() {
    if (!this.thread) return this.load();
    let post;
    try {
      post = (await api(`api/courses/${this.course}/posts/${this.postId}`)).data;
    } catch (error) {
      if (error.status === 404) this.deleted();
      return;
    }
    this.thread.card.update(post);
    await this.thread.reload();
  }

  deleted() {
    this.thread = null;
    fill(this.body, this.back, h('div', { class: 'error-panel post-gone', role: 'status' }, 'This post was deleted.'));
  }

  onEvent(kind, data, gated) {
    if (!this.thread) return null;
    if (kind === 'post' && data.id === this.postId) {
      if (data.deleted_at != null) this.deleted();
      else this.thread.card.update(data);
    } else if (kind === 'comment' && data.post_id === this.postId) {
      this.thread.arrived(data);
    } else if (kind === 'likes' && data.post_id === this.postId) {
      if (data.target.kind === 'post') this.thread.card.likeCount(data.like_count);
      else this.thread.likeCount(data.target.id, data.like_count);
    } else if (kind === 'changed' && data.post_id === this.postId) {
      return withheld(this.course, data, gated, (item) => {
        if (data.kind === 'post') {
          if (item) this.thread?.card.update(item);
          else this.deleted();
        } else if (item) {
          // As its own event would have come: a creation counts once, an edit repaints.
          this.thread?.arrived({ ...item, version: data.version <= 1 ? 1 : item.version }, item);
        } else if (data.version <= 1) {
          this.thread?.card.commentCount(this.thread.tally.delta({ id: data.comment_id, parent_id: data.parent_id }));
        }
      });
    }
    return null;
  }
}

class Thread {
  constructor(course, post, card) {
    this.course = course;
    this.post = post;
    this.card = card;
    this.cursor = null;
    this.tally = new CommentTally();
    this.roots = new Map(); // root comment id -> {comment, el, replies, more, seen, cursor, loaded}
    this.removing = new Map(); // comment id -> this teacher's removal on its way
    this.list = h('ol', { class: 'comments', 'aria-label': 'Comments' });
    this.more = h('div', { class: 'list-more' });
    this.openForm = null;
    this.section = h('section', { class: 'discussion' },
      h('h2', {}, 'Comments'),
      this.composer(null, 'Write a comment…', 'Comment'),
      this.list,
      this.more);
  }

  url(path) {
    return `api/courses/${this.course}/${path}`;
  }

  async loadComments() {
    let page;
    try {
      page = await api(this.url(`posts/${this.post.id}/comments`), { query: { limit: COMMENTS_PER_PAGE, after_id: this.cursor } });
    } catch (error) {
      notify(explain(error, 'the comments'), 'error');
      return;
    }
    for (const comment of page.data) this.addRoot(comment);
    if (!this.roots.size) fill(this.list, h('li', { class: 'muted empty-comments' }, 'No comments yet.'));
    this.cursor = page.pagination.has_more ? page.pagination.next_after_id : null;
    fill(this.more, this.cursor ? busyButton('More comments', () => this.loadComments(), { class: 'ghost wide' }) : null);
  }

  /** Show comment `id` (a search result) where it is in the thread: the pages up to its root
   * comment read, and a reply's page of replies; scrolled to and highlighted. */
  async reveal(id) {
    let comment;
    try {
      comment = (await api(this.url(`comments/${id}`))).data;
    } catch (error) {
      notify(explain(error, 'that comment'), 'error');
      return;
    }
    const rootId = comment.parent_id ?? comment.id;
    // Roots come oldest first (after_id): read on until its page is in.
    while (!this.roots.has(rootId) && this.cursor != null) {
      const before = this.cursor;
      await this.loadComments();
      if (this.cursor === before) break;
    }
    const root = this.roots.get(rootId);
    let el = root?.el;
    if (root && comment.parent_id != null) {
      if (!root.loaded) await this.loadReplies(root);
      while (!root.seen.has(comment.id) && root.cursor != null) {
        const before = root.cursor;
        await this.loadReplies(root);
        if (root.cursor === before) break;
      }
      el = root.replies.querySelector(`[data-id="${comment.id}"]`);
    }
    if (!el) {
      notify('That comment is no longer in this post.');
      return;
    }
    showFound(el);
  }

  /** The comments from their first page again (after a reset); the open reply form goes. */
  async reload() {
    this.roots.clear();
    this.tally = new CommentTally();
    this.cursor = null;
    this.openForm = null;
    this.list.replaceChildren();
    await this.loadComments();
  }

  /** A comment of this post from the stream: new ones where the pages would put them (a root
   * after the loaded ones only once every page is in), deleted ones out; counts once each. */
  arrived(comment, shown = comment) {
    const deleted = comment.deleted_at != null;
    const block = this.list.querySelector(`.comment[data-id="${comment.id}"] > .comment-block`);
    if (!deleted && (comment.version > 1 || block)) {
      // An edit (or a creation already shown): the text where it is shown; no count moves.
      block?.update(shown);
      return;
    }
    // A teacher's removal keeps its place: said by the event, or by this page's own removal
    // whose answer has not come yet, or already shown.
    const already = this.list.querySelector(`.comment[data-id="${comment.id}"][data-removed="true"]`);
    const removal = deleted ? (comment.removed_by ? comment : this.removing.get(comment.id) ?? (already ? {} : null)) : null;
    comment = { ...shown, deleted_at: comment.deleted_at };
    const delta = this.tally.delta(comment);
    this.card.commentCount(delta);
    if (comment.parent_id == null) {
      if (removal) this.markRemoved(comment.id, null, removal);
      else if (deleted) this.dropRoot(comment.id);
      else if (this.cursor == null) this.addRoot(fresh(comment));
      return;
    }
    const root = this.roots.get(comment.parent_id);
    if (!root) return;
    if (removal && root.seen.has(comment.id)) {
      this.markRemoved(comment.id, root, removal);
    } else if (deleted) {
      if (!this.dropReply(root, comment.id) && delta) root.comment.reply_count = Math.max(0, root.comment.reply_count - 1);
    } else {
      if (delta) root.comment.reply_count += 1;
      if (root.loaded && root.cursor == null) this.addReply(root, fresh(comment));
    }
    this.paintRepliesButton(root);
  }

  likeCount(commentId, n) {
    this.list.querySelector(`.comment[data-id="${commentId}"] > .comment-block .like`)?.setCount(n);
  }

  dropRoot(id) {
    this.roots.get(id)?.el.remove();
    this.roots.delete(id);
    if (!this.roots.size && this.cursor == null) fill(this.list, h('li', { class: 'muted empty-comments' }, 'No comments yet.'));
  }

  /** Take a shown reply out (its root's count with it); false when it was not shown. */
  dropReply(root, id) {
    if (!root.seen.has(id)) return false;
    root.replies.querySelector(`[data-id="${id}"]`)?.remove();
    root.seen.delete(id);
    root.comment.reply_count = Math.max(0, root.comment.reply_count - 1);
    this.paintRepliesButton(root);
    return true;
  }

  /** A comment a teacher removed stays where it was, as a note of the removal (a root's replies
   * went with it); `root`: the reply's root, null for a root. */
  markRemoved(id, root, removal) {
    const el = root ? root.replies.querySelector(`[data-id="${id}"]`) : this.roots.get(id)?.el;
    const block = el?.querySelector(':scope > .comment-block');
    if (!block || el.dataset.removed === 'true') return;
    const note = h('div', { class: 'comment-block removed' }, removedNote(removal));
    block.replaceWith(note);
    el.dataset.removed = 'true';
    if (!root) {
      const entry = this.roots.get(id);
      entry.replies.replaceChildren();
      entry.seen.clear();
      entry.comment.reply_count = 0;
      entry.loaded = true;
      entry.cursor = null;
      fill(entry.more);
    } else {
      root.comment.reply_count = Math.max(0, root.comment.reply_count - 1);
    }
  }

  addRoot(comment) {
    if (this.roots.has(comment.id)) return;
    // Deleted by its author: gone. Removed by a teacher: its place says so.
    if (comment.deleted && !comment.removed_by) return;
    this.list.querySelector('.empty-comments')?.remove();
    const replies = h('ol', { class: 'replies', 'aria-label': 'Replies' });
    const more = h('div', { class: 'replies-more' });
    const root = { comment, replies, more, seen: new Set(), cursor: null, loaded: false };
    const removed = Boolean(comment.deleted);
    root.el = h('li', { class: 'comment root', dataset: { id: comment.id, ...(removed ? { removed: 'true' } : {}) } },
      removed ? h('div', { class: 'comment-block removed' }, removedNote(comment)) : this.commentBody(comment, comment), replies, more);
    if (removed) root.loaded = root.comment.reply_count === 0;
    this.roots.set(comment.id, root);
    this.paintRepliesButton(root);
    this.list.append(root.el);
  }

  paintRepliesButton(root) {
    const left = root.comment.reply_count - root.seen.size;
    if (!root.loaded && root.comment.reply_count > 0) {
      fill(root.more, busyButton(`Show ${plural(root.comment.reply_count, 'reply', 'replies')}`, () => this.loadReplies(root), { class: 'ghost small' }));
    } else if (root.cursor != null && left > 0) {
      fill(root.more, busyButton(`More replies (${left})`, () => this.loadReplies(root), { class: 'ghost small' }));
    } else {
      fill(root.more);
    }
  }

  async loadReplies(root) {
    let page;
    try {
      page = await api(this.url(`comments/${root.comment.id}/replies`), { query: { limit: REPLIES_PER_PAGE, after_id: root.cursor } });
    } catch (error) {
      notify(explain(error, 'the replies'), 'error');
      return;
    }
    root.loaded = true;
    for (const reply of page.data) this.addReply(root, reply);
    root.cursor = page.pagination.has_more ? page.pagination.next_after_id : null;
    this.paintRepliesButton(root);
  }

  addReply(root, reply) {
    if (root.seen.has(reply.id)) return null;
    if (reply.deleted && !reply.removed_by) return null;
    root.seen.add(reply.id);
    const removed = Boolean(reply.deleted);
    const el = h('li', { class: 'comment reply', dataset: { id: reply.id, parent: root.comment.id, ...(removed ? { removed: 'true' } : {}) } },
      removed ? h('div', { class: 'comment-block removed' }, removedNote(reply)) : this.commentBody(reply, root.comment));
    root.replies.append(el);
    return el;
  }

  commentBody(comment, root) {
    const isReply = comment.parent_id != null;
    const to = comment.reply_to_user_id != null ? h('span', { class: 'reply-to' }, `↪ replying to ${who(comment.reply_to_user_id)}`) : null;
    const slot = h('div', { class: 'form-slot' });
    const meta = h('div', { class: 'meta muted' });
    const bodyEl = h('div', { class: 'comment-body markdown' });
    const paintText = () => {
      fill(meta, avatar(comment.user_id, comment.author_name), ' ', h('strong', {}, who(comment.user_id, comment.author_name)), ' · ', timeEl(comment.created_at), to ? ' · ' : null, to,
        editedMark(this.course, 'comment', comment));
      fill(bodyEl, renderMarkdown(comment.body));
    };
    paintText();
    const block = h('div', { class: 'comment-block' },
      meta,
      bodyEl,
      h('div', { class: 'actions' },
        likeButton(this.course, 'comment', comment),
        likers(this.course, 'comment', comment),
        h('button', { type: 'button', class: 'ghost small reply-button', onclick: () => this.toggleForm(slot, comment) }, 'Reply'),
        mayEdit(comment) ? editButton(isReply ? 'reply' : 'comment', comment, slot, async (fields) => {
          const reply = await api(this.url(`comments/${comment.id}`), { method: 'PATCH', body: { body: fields.body, reason: fields.reason } });
          block.update(reply.data);
        }) : null,
        deleteControl(isReply ? 'reply' : 'comment', comment, (reason) => this.remove(comment, root, isReply, reason),
          () => (isReply ? 0 : this.roots.get(comment.id)?.comment.reply_count ?? comment.reply_count ?? 0))),
      slot);
    /** An edit of this comment (its answer, or its event): the new text. */
    block.update = (latest) => {
      if (!(latest.version > comment.version)) return;
      Object.assign(comment, { body: latest.body, edited_at: latest.edited_at, version: latest.version });
      paintText();
    };
    return block;
  }

  toggleForm(slot, target) {
    if (this.openForm && this.openForm.slot === slot) {
      slot.replaceChildren();
      this.openForm = null;
      return;
    }
    this.openForm?.slot.replaceChildren();
    fill(slot, this.composer(target, `Reply to ${who(target.user_id)}…`, 'Reply'));
    this.openForm = { slot };
    slot.querySelector('textarea').focus();
  }

  composer(target, placeholder, label) {
    const text = h('textarea', { rows: 2, maxlength: 20000, required: true, placeholder, 'aria-label': placeholder });
    const submit = h('button', { type: 'submit' }, label);
    const key = new CreateKey();
    const form = h('form', { class: `composer ${target ? 'reply-form' : 'comment-form'}`, onsubmit: async (event) => {
      event.preventDefault();
      submit.disabled = true;
      try {
        const body = { body: text.value };
        if (target) body.parent_id = target.id;
        const created = (await create(this.url(`posts/${this.post.id}/comments`), body, key)).data;
        key.done();
        form.reset();
        await this.placeNew(created);
        if (target) {
          this.openForm?.slot.replaceChildren();
          this.openForm = null;
        }
      } catch (error) {
        notify(explain(error, target ? 'the comment you reply to' : 'this post'), 'error');
      } finally {
        submit.disabled = false;
      }
    } }, text, submit);
    return form;
  }

  /** A new comment where the server put it: a reply (to a comment or to a reply) goes under its
   * root comment (parent_id), after the replies already there. */
  async placeNew(created) {
    // Its event may have come first: then it is counted and maybe shown already.
    const counted = this.tally.delta(created);
    this.card.commentCount(counted);
    if (created.parent_id == null) {
      this.addRoot(created);
      this.roots.get(created.id).el.scrollIntoView({ block: 'nearest' });
      return;
    }
    const root = this.roots.get(created.parent_id);
    if (!root) return;
    if (counted) root.comment.reply_count += 1;
    if (!root.loaded) await this.loadReplies(root);
    // Replies are oldest first: load on to the end, where the new one is.
    while (root.cursor != null && !root.seen.has(created.id)) await this.loadReplies(root);
    if (!root.seen.has(created.id)) this.addReply(root, created);
    this.paintRepliesButton(root);
    const el = root.replies.querySelector(`[data-id="${created.id}"]`);
    if (el) {
      el.classList.add('flash');
      el.scrollIntoView({ block: 'nearest' });
      setTimeout(() => el.classList.remove('flash'), 1500);
    }
  }

  async remove(comment, root, isReply, reason) {
    // Another's, removed by a teacher: its place stays, saying so (its event may come first).
    const removal = comment.user_id !== session.userId
      ? { removed_by: { user_id: session.userId, name: null }, removal_reason: reason, removed_at: new Date().toISOString() }
      : null;
    if (removal) this.removing.set(comment.id, removal);
    try {
      await api(this.url(`comments/${comment.id}`), { method: 'DELETE', query: { reason } });
    } catch (error) {
      this.removing.delete(comment.id);
      notify(explain(error, isReply ? 'this reply' : 'this comment'), 'error');
      return;
    }
    // Its event may have come first and done all this already (the tally says 0 then).
    if (isReply) {
      const entry = this.roots.get(root.id);
      this.card.commentCount(this.tally.delta(comment, true));
      if (entry && removal) this.markRemoved(comment.id, entry, removal);
      else if (entry) this.dropReply(entry, comment.id);
    } else {
      const entry = this.roots.get(comment.id);
      this.card.commentCount(this.tally.delta(entry?.comment ?? comment, true));
      if (removal) this.markRemoved(comment.id, null, removal);
      else this.dropRoot(comment.id);
    }
    if (removal) notify(isReply ? 'Reply removed.' : 'Comment and its replies removed.');
    else notify(isReply ? 'Reply deleted.' : 'Comment and its replies deleted.');
  }
}
