// The course forum: a course's feed, a post with its comments and two-level replies, writing,
// deleting your own, and likes that answer at once and then settle on the server's state.
import { api, devGateway, explain } from './api.js';
import { fill, h, plural, timeEl } from './dom.js';
import { go } from './router.js';
import { session } from './session.js';
import { busyButton, deleteButton, errorPanel, notify } from './ui.js';

const POSTS_PER_PAGE = 10;
const COMMENTS_PER_PAGE = 10;
const REPLIES_PER_PAGE = 10;
const RECENT_KEY = 'agora.recent-courses';

export async function forumView(main, [coursePart, section, postPart]) {
  const course = /^[1-9][0-9]{0,18}$/.test(coursePart ?? '') ? coursePart : null;
  const body = h('div', { class: 'forum-body' });
  fill(main, h('div', { class: 'forum' }, await coursePicker(course), body));
  if (!course) {
    fill(body, h('p', { class: 'muted' }, 'Open a course to read its forum.'));
    return;
  }
  remember(course);
  if (section === 'posts' && /^[1-9][0-9]*$/.test(postPart ?? '')) await postView(body, course, postPart);
  else await feedView(body, course);
}

// --- the course ---------------------------------------------------------------------------------

async function coursePicker(course) {
  // No API lists the courses a user is enrolled in: the reader names the course.
  const dev = await devGateway();
  const offered = new Map();
  if (dev) {
    offered.set('42', 'demo: you are enrolled (users 7, 8, 9)');
    offered.set('99', 'demo: users 7, 8, 9 are not enrolled');
  }
  for (const id of recent()) if (!offered.has(id)) offered.set(id, 'opened recently');
  const input = h('input', {
    id: 'course', type: 'text', inputmode: 'numeric', pattern: '[1-9][0-9]*', required: true,
    list: 'course-options', value: course ?? '', placeholder: 'e.g. 42', autocomplete: 'off',
  });
  return h('form', { class: 'course-picker', onsubmit: (event) => {
    event.preventDefault();
    const id = input.value.trim();
    if (!/^[1-9][0-9]{0,18}$/.test(id)) {
      notify('A course id is a positive whole number, e.g. 42.', 'error');
      return;
    }
    go(`#/forum/${id}`);
  } },
  h('label', { for: 'course' }, 'Course'),
  input,
  h('datalist', { id: 'course-options' }, [...offered].map(([id, label]) => h('option', { value: id, label: `${id} — ${label}` }))),
  h('button', { type: 'submit' }, 'Open'),
  dev ? h('span', { class: 'quick' }, [...offered.keys()].slice(0, 4).map((id) => h('a', { href: `#/forum/${id}`, class: 'chip', 'aria-current': id === course ? 'true' : null }, `Course ${id}`))) : null,
  h('p', { class: 'muted hint' }, 'There is no API listing your courses yet: type a course id.'));
}

function recent() {
  try {
    const list = JSON.parse(localStorage.getItem(RECENT_KEY) ?? '[]');
    return Array.isArray(list) ? list.filter((id) => /^[1-9][0-9]*$/.test(id)).slice(0, 5) : [];
  } catch {
    return [];
  }
}

function remember(course) {
  localStorage.setItem(RECENT_KEY, JSON.stringify([course, ...recent().filter((id) => id !== course)].slice(0, 5)));
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

function who(userId) {
  return userId === session.userId ? 'you' : `user ${userId}`;
}

// --- the feed -------------------------------------------------------------------------------------

async function feedView(body, course) {
  const list = h('ol', { class: 'feed', 'aria-label': `Posts of course ${course}` });
  const more = h('div', { class: 'list-more' });
  let cursor = null;
  const seen = new Set();

  const load = async () => {
    let page;
    try {
      page = await api(`api/courses/${course}/posts`, { query: { limit: POSTS_PER_PAGE, before_id: cursor } });
    } catch (error) {
      if (cursor == null) fill(body, h('h1', {}, `Course ${course}`), courseError(error, course));
      else notify(explain(error, `course ${course}`), 'error');
      return;
    }
    for (const post of page.data) {
      if (seen.has(post.id)) continue;
      seen.add(post.id);
      list.append(h('li', {}, postCard(course, post, { onDeleted: (el) => el.closest('li').remove() })));
    }
    if (!seen.size) fill(list, h('li', { class: 'muted' }, 'No posts yet: write the first one.'));
    cursor = page.pagination.has_more ? page.pagination.next_before_id : null;
    fill(more, cursor ? busyButton('Older posts', load, { class: 'ghost wide' }) : seen.size ? h('p', { class: 'muted center' }, 'That is every post.') : null);
  };

  const composer = postComposer(course, (post) => {
    if (!seen.size) list.replaceChildren();
    seen.add(post.id);
    list.prepend(h('li', {}, postCard(course, post, { onDeleted: (el) => el.closest('li').remove() })));
  });
  fill(body, h('h1', {}, `Course ${course}`), composer, list, more);
  await load();
}

function postComposer(course, created) {
  const title = h('input', { id: 'post-title', maxlength: 200, required: true, placeholder: 'Title' });
  const text = h('textarea', { id: 'post-body', rows: 3, maxlength: 20000, required: true, placeholder: 'Write something for the course… (Tiếng Việt, emoji 👍 welcome)' });
  const submit = h('button', { type: 'submit' }, 'Post');
  const form = h('form', { class: 'card composer', onsubmit: async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      const reply = await api(`api/courses/${course}/posts`, { method: 'POST', body: { title: title.value, body: text.value } });
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
  const card = h('article', { class: `post${full ? ' full' : ''}`, dataset: { id: post.id } },
    h(full ? 'h1' : 'h2', { class: 'post-title' }, full ? post.title : h('a', { href: link }, post.title)),
    h('div', { class: 'meta muted' }, `by ${who(post.user_id)} · `, timeEl(post.created_at)),
    h('p', { class: 'post-body' }, full || post.body.length <= 300 ? post.body : `${post.body.slice(0, 300)}…`));
  const comments = h('a', { href: link, class: 'comment-count' }, `💬 ${plural(post.comment_count, 'comment')}`);
  card.append(h('div', { class: 'actions' },
    likeButton(course, 'post', post),
    comments,
    post.user_id === session.userId ? deleteButton('Delete', async () => {
      try {
        await api(`api/courses/${course}/posts/${post.id}`, { method: 'DELETE' });
        notify('Post deleted.');
        onDeleted(card);
      } catch (error) {
        notify(explain(error, 'this post'), 'error');
      }
    }) : null));
  card.commentCount = (delta) => {
    post.comment_count = Math.max(0, post.comment_count + delta);
    comments.textContent = `💬 ${plural(post.comment_count, 'comment')}`;
  };
  return card;
}

// --- likes ----------------------------------------------------------------------------------------

/** ♥ n: flips at once; the answer decides (liked, and the count moves only if it changed); a
 * refusal (429 too fast, 404 gone, 403) puts it back and says why. */
function likeButton(course, kind, item) {
  const count = h('span', { class: 'like-count' });
  const heart = h('span', { class: 'heart', 'aria-hidden': 'true' });
  const button = h('button', { type: 'button', class: 'like ghost', onclick: toggle }, heart, count);
  let busy = false;

  function paint() {
    const liked = item.liked_by_me === true;
    heart.textContent = liked ? '♥' : '♡';
    count.textContent = String(item.like_count);
    button.setAttribute('aria-pressed', String(liked));
    button.dataset.liked = String(liked);
    button.dataset.count = String(item.like_count);
    button.title = item.liked_by_me == null ? 'Like (your like state is unknown right now)' : liked ? 'Unlike' : 'Like';
    button.setAttribute('aria-label', `${liked ? 'Unlike' : 'Like'} (${item.like_count} like${item.like_count === 1 ? '' : 's'})`);
  }

  async function toggle() {
    if (busy) return;
    busy = true;
    button.setAttribute('aria-busy', 'true');
    const before = { liked: item.liked_by_me === true, count: item.like_count };
    const like = !before.liked;
    item.liked_by_me = like;
    item.like_count = Math.max(0, before.count + (like ? 1 : -1));
    paint();
    try {
      const reply = await api(`api/courses/${course}/${kind}s/${item.id}/like`, { method: 'POST', body: { like } });
      item.liked_by_me = reply.liked;
      // Unchanged: the server already was in that state, which the shown count included.
      if (!reply.changed || reply.liked !== like) item.like_count = before.count;
    } catch (error) {
      item.liked_by_me = before.liked;
      item.like_count = before.count;
      notify(likeRefused(error, kind, like), 'error');
    } finally {
      busy = false;
      button.removeAttribute('aria-busy');
      paint();
    }
  }

  paint();
  return button;
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

async function postView(body, course, postId) {
  const back = h('a', { href: `#/forum/${course}`, class: 'back' }, `← Course ${course}`);
  fill(body, back, h('p', { class: 'muted' }, 'Loading the post…'));
  let post;
  try {
    post = (await api(`api/courses/${course}/posts/${postId}`)).data;
  } catch (error) {
    fill(body, back, error.status === 403 ? courseError(error, course) : errorPanel(error, `post ${postId} of course ${course}`));
    return;
  }
  const card = postCard(course, post, { full: true, onDeleted: () => go(`#/forum/${course}`) });
  const thread = new Thread(course, post, card);
  fill(body, back, card, thread.section);
  await thread.loadComments();
}

class Thread {
  constructor(course, post, card) {
    this.course = course;
    this.post = post;
    this.card = card;
    this.cursor = null;
    this.roots = new Map(); // root comment id -> {comment, el, replies, more, seen, cursor, loaded}
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

  addRoot(comment) {
    if (this.roots.has(comment.id)) return;
    this.list.querySelector('.empty-comments')?.remove();
    const replies = h('ol', { class: 'replies', 'aria-label': 'Replies' });
    const more = h('div', { class: 'replies-more' });
    const root = { comment, replies, more, seen: new Set(), cursor: null, loaded: false };
    root.el = h('li', { class: 'comment root', dataset: { id: comment.id } },
      this.commentBody(comment, comment), replies, more);
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
    root.seen.add(reply.id);
    const el = h('li', { class: 'comment reply', dataset: { id: reply.id, parent: root.comment.id } }, this.commentBody(reply, root.comment));
    root.replies.append(el);
    return el;
  }

  commentBody(comment, root) {
    const isReply = comment.parent_id != null;
    const to = comment.reply_to_user_id != null ? h('span', { class: 'reply-to' }, `↪ replying to ${who(comment.reply_to_user_id)}`) : null;
    const slot = h('div', { class: 'form-slot' });
    const block = h('div', { class: 'comment-block' },
      h('div', { class: 'meta muted' }, h('strong', {}, who(comment.user_id)), ' · ', timeEl(comment.created_at), to ? ' · ' : null, to),
      h('p', { class: 'comment-body' }, comment.body),
      h('div', { class: 'actions' },
        likeButton(this.course, 'comment', comment),
        h('button', { type: 'button', class: 'ghost small reply-button', onclick: () => this.toggleForm(slot, comment) }, 'Reply'),
        comment.user_id === session.userId ? deleteButton('Delete', () => this.remove(comment, root, isReply)) : null),
      slot);
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
    const form = h('form', { class: `composer ${target ? 'reply-form' : 'comment-form'}`, onsubmit: async (event) => {
      event.preventDefault();
      submit.disabled = true;
      try {
        const body = { body: text.value };
        if (target) body.parent_id = target.id;
        const created = (await api(this.url(`posts/${this.post.id}/comments`), { method: 'POST', body })).data;
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
    this.card.commentCount(1);
    if (created.parent_id == null) {
      this.addRoot(created);
      this.roots.get(created.id).el.scrollIntoView({ block: 'nearest' });
      return;
    }
    const root = this.roots.get(created.parent_id);
    if (!root) return;
    root.comment.reply_count += 1;
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

  async remove(comment, root, isReply) {
    try {
      await api(this.url(`comments/${comment.id}`), { method: 'DELETE' });
    } catch (error) {
      notify(explain(error, isReply ? 'this reply' : 'this comment'), 'error');
      return;
    }
    if (isReply) {
      const entry = this.roots.get(root.id);
      entry?.replies.querySelector(`[data-id="${comment.id}"]`)?.remove();
      if (entry) {
        entry.comment.reply_count = Math.max(0, entry.comment.reply_count - 1);
        entry.seen.delete(comment.id);
      }
      this.card.commentCount(-1);
    } else {
      const entry = this.roots.get(comment.id);
      entry?.el.remove();
      this.roots.delete(comment.id);
      this.card.commentCount(-1 - (entry ? entry.comment.reply_count : 0));
    }
    notify(isReply ? 'Reply deleted.' : 'Comment and its replies deleted.');
  }
}
