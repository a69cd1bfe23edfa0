// The open conversation: messages grouped by sender and day, paging back,
// the new-messages marker, receipts, the composer, and read markers sent
// only for messages a person can see.

import { h, linkify } from './dom.js';
import { attachmentsEl, PendingFiles } from './files.js';
import { Coalescer } from './util.js';
import { dayKey, dayLabel, formatFull, formatTime, hue, initials, plural, preview } from './format.js';
import { isText } from './mutations.js';
import { Autocomplete, renderBody } from './mentions.js';
import { openPicker, reactionsEl } from './reactions.js';
import { actionsEl, quoteEl } from './messageparts.js';
import { typingText } from './presence.js';
import { confirmDialog } from './dialogs.js';
import { muteControl } from './notify.js';
import { Drafts } from './drafts.js';
import { bodyTooLong } from './limits.js';

const GROUP_GAP_MS = 5 * 60 * 1000;
const NEAR_BOTTOM_PX = 48;
const LOAD_OLDER_PX = 300;
const KEEP_OPEN = 3000;
const HIGHLIGHT_MS = 2500;

export class ConversationView {
  constructor(client, users, { onBack, onDetails }) {
    this.client = client;
    this.users = users;
    this.onBack = onBack;
    this.onDetails = onDetails;
    this.convId = null;
    this.drafts = new Drafts(client.me.id);
    this.root = h('section', { class: 'chat', id: 'chat', 'aria-label': 'Conversation' });
    this.renderer = new Coalescer(() => this.render());
    // List changes (any conversation's traffic) only touch the header, the
    // composer state and the floating buttons, not the message list.
    this.headerRenderer = new Coalescer(() => this.renderHeader());
    this.scroller = new Coalescer(() => this.onScrolled());
    const mine = (id) => id === this.convId;
    client.on('timeline', (id) => mine(id) && this.renderer.schedule());
    client.on('pending', (id) => mine(id) && this.renderer.schedule());
    client.on('members', (id) => mine(id) && this.renderer.schedule());
    client.on('mutation', (id) => mine(id) && this.renderer.schedule());
    client.presence.on('typing', (id) => mine(id) && this.renderTyping());
    client.presence.on('presence', () => this.convId && this.headerRenderer.schedule());
    client.on('storm', (id) => (id === null || mine(id)) && this.renderer.schedule());
    client.on('convs', () => this.convId && this.headerRenderer.schedule());
    client.on('message', (id, m, live) => {
      if (!mine(id) || !live || m.from === client.me.id || !isText(m)) return;
      // A message that comes while nobody looks starts a "new messages"
      // marker, as if the conversation had been opened with it unread.
      if (this.boundary === null && !this.attentive()) {
        this.boundary = m.seq - 1;
        this.markerSeen = false;
      }
      this.announce(m);
    });
    this.usersVersion = 0;
    users.on('change', () => {
      this.usersVersion++;
      if (this.convId) this.renderer.schedule();
    });
    window.addEventListener('focus', () => this.checkRead());
    document.addEventListener('visibilitychange', () => this.checkRead());
    window.addEventListener('resize', () => this.scroller.schedule());
    this.showEmpty();
  }

  // announce tells screen readers about new messages from others, one by
  // one when they are few and as a count when they come in bursts.
  announce(m) {
    if (!this.announcer) return;
    this.announced = (this.announced ?? 0) + 1;
    if (this.announceTimer) return;
    const first = `${this.users.name(m.from)}: ${m.body}`;
    this.announceTimer = setTimeout(() => {
      const n = this.announced;
      this.announced = 0;
      this.announceTimer = null;
      if (this.announcer) this.announcer.textContent = n === 1 ? first : `${n} new messages`;
    }, 400);
  }

  attentive() {
    return document.visibilityState === 'visible' && document.hasFocus();
  }

  showEmpty() {
    this.leave();
    this.root.classList.add('empty');
    this.root.replaceChildren(
      h(
        'div',
        { class: 'chat-empty' },
        h('h2', null, 'No conversation open'),
        h('p', null, 'Pick a conversation from the list, or start a new chat or group.'),
        h(
          'p',
          { class: 'hint shortcuts' },
          'Keyboard: Ctrl+K filters conversations, Alt+↑/↓ moves between them, Enter sends and Shift+Enter starts a new line.',
        ),
      ),
    );
  }

  leave() {
    if (this.convId) {
      if (this.editing) this.cancelEdit();
      this.saveDraft();
      this.replyTo = null;
      this.client.close(this.convId);
    }
    this.convId = null;
  }

  // saveDraft keeps the composer's text and reply target of the open
  // conversation; while editing, the draft is what the edit set aside.
  saveDraft() {
    if (!this.convId || !this.input) return;
    if (this.editing) this.drafts.set(this.convId, this.editDraft ?? '', this.editReplyTo ?? null);
    else this.drafts.set(this.convId, this.input.value, this.replyTo);
  }

  async show(convId) {
    if (this.convId === convId) return;
    this.leave();
    const { client } = this;
    this.convId = convId;
    this.root.classList.remove('empty');
    const conv = client.convs.get(convId);
    // boundary: the read marker when the conversation was opened; the
    // "new messages" line goes above the first message past it.
    this.boundary = conv && conv.max_seq > conv.read_seq ? conv.read_seq : null;
    this.positioned = false;
    this.markerSeen = false;
    this.msgCache = new Map();
    this.buildSkeleton();
    this.render();
    await client.open(convId);
    if (this.convId !== convId) return;
    const now = client.convs.get(convId);
    if (this.boundary === null && now && now.max_seq > now.read_seq && !conv) this.boundary = now.read_seq;
    // Bring the first unread into the page when it is not far back.
    const tl = client.timeline(convId);
    if (this.boundary !== null && tl.lo > this.boundary + 1 && (now?.max_seq ?? 0) - this.boundary <= 300) {
      await client.ensureLoaded(convId, this.boundary + 1).catch(() => {});
      if (this.convId !== convId) return;
    }
    this.render();
    this.positionInitially();
    this.positioned = true;
    const jump = this.pendingJump?.convId === convId ? this.pendingJump.seq : null;
    this.pendingJump = null;
    if (jump) {
      await this.jumpTo(jump);
      return;
    }
    this.updateFloating();
    this.checkRead();
  }

  // openAt opens a conversation scrolled to one message, highlighted (a
  // search result).
  openAt(convId, seq) {
    if (this.convId === convId && this.positioned) {
      this.jumpTo(seq);
      return;
    }
    this.pendingJump = { convId, seq };
    const hash = `#/c/${encodeURIComponent(convId)}`;
    if (location.hash !== hash) location.hash = hash;
  }

  // jumpTo scrolls to a message and highlights it, paging back until it is
  // loaded.
  async jumpTo(seq) {
    const convId = this.convId;
    if (!convId) return;
    if (!this.client.timeline(convId).has(seq)) {
      await this.client.ensureLoaded(convId, seq).catch(() => {});
      if (this.convId !== convId) return;
    }
    this.render();
    const el = this.listEl.querySelector(`.msg[data-seq="${seq}"]`);
    if (!el) {
      this.client.emit('notice', 'That message is no longer available.');
      return;
    }
    this.listEl.scrollTop += el.getBoundingClientRect().top - this.listEl.getBoundingClientRect().top - (this.listEl.clientHeight - el.offsetHeight) / 2;
    this.highlightSeq = seq;
    this.highlightUntil = Date.now() + HIGHLIGHT_MS;
    this.applyHighlight();
    clearTimeout(this.highlightTimer);
    this.highlightTimer = setTimeout(() => {
      this.highlightSeq = null;
      for (const x of this.listEl?.querySelectorAll('.msg.highlight') ?? []) x.classList.remove('highlight');
    }, HIGHLIGHT_MS);
    this.updateFloating();
    this.checkRead();
  }

  applyHighlight() {
    if (!this.highlightSeq || Date.now() > this.highlightUntil) return;
    this.listEl.querySelector(`.msg[data-seq="${this.highlightSeq}"]`)?.classList.add('highlight');
  }

  buildSkeleton() {
    this.files?.clear();
    this.titleEl = h('h2', { class: 'chat-title', id: 'chat-title', dir: 'auto' });
    this.subtitleEl = h('p', { class: 'chat-subtitle', id: 'chat-subtitle' });
    this.stormEl = h('div', { class: 'storm-banner', id: 'storm-banner', role: 'status', hidden: true });
    this.listEl = h('div', {
      class: 'messages',
      id: 'messages',
      role: 'log',
      'aria-label': 'Messages',
      // The list is rebuilt on changes; announcing it would repeat
      // everything. New messages are announced by this.announcer instead.
      'aria-live': 'off',
      tabindex: '0',
    });
    this.announcer = h('div', { class: 'sr-only', 'aria-live': 'polite', id: 'announcer' });
    this.listEl.addEventListener('scroll', () => this.scroller.schedule(), { passive: true });
    this.jumpUnreadEl = h(
      'button',
      { type: 'button', class: 'floating jump-unread', id: 'jump-unread', hidden: true, onClick: () => this.jumpToUnread() },
      '↑ Jump to first unread',
    );
    this.jumpLatestEl = h(
      'button',
      { type: 'button', class: 'floating jump-latest', id: 'jump-latest', hidden: true, onClick: () => this.jumpToLatest() },
      '↓ Latest',
    );
    this.input = h('textarea', {
      id: 'composer-input',
      class: 'composer-input',
      rows: '1',
      placeholder: 'Write a message',
      'aria-label': 'Message',
      'aria-describedby': 'composer-hint',
      enterkeyhint: 'send',
      onKeydown: (e) => this.onComposerKey(e),
      onInput: () => this.onComposerInput(),
    });
    this.autocomplete = new Autocomplete(this.input, () => this.mentionCandidates());
    this.contextEl = h('div', { class: 'composer-context', id: 'composer-context', hidden: true });
    this.typingEl = h('div', { class: 'typing-line', id: 'typing', 'aria-live': 'polite' });
    const draft = this.drafts.get(this.convId);
    this.input.value = draft.body;
    this.replyTo = draft.replyTo;
    this.errorEl = h('p', { class: 'composer-error', id: 'composer-error', role: 'alert', hidden: true });
    this.files = new PendingFiles({ api: this.client.api, onError: (text) => this.client.emit('notice', text) });
    this.composerEl = h(
      'form',
      { class: 'composer', id: 'composer', onSubmit: (e) => this.onSubmit(e) },
      this.files.listEl,
      this.files.picker,
      this.files.button,
      this.input,
      h('button', { type: 'submit', class: 'btn primary', id: 'send-btn' }, 'Send'),
      h('p', { class: 'sr-only', id: 'composer-hint' }, 'Enter sends, Shift+Enter starts a new line.'),
    );
    this.leftEl = h('p', { class: 'left-notice', id: 'left-notice', hidden: true }, 'You are no longer a member of this conversation. You can still read what was sent while you were in it.');
    this.root.replaceChildren(
      h(
        'header',
        { class: 'chat-header' },
        h('button', { type: 'button', class: 'btn icon back', id: 'back-btn', 'aria-label': 'Back to conversations', onClick: () => this.onBack() }, '←'),
        h('div', { class: 'chat-heading' }, this.titleEl, this.subtitleEl),
        muteControl(this.client.api, this.client, () => this.convId),
        h('button', { type: 'button', class: 'btn', id: 'details-btn', onClick: () => this.onDetails(this.convId) }, 'Details'),
      ),
      this.stormEl,
      h('div', { class: 'chat-body' }, this.listEl, this.jumpUnreadEl, this.jumpLatestEl, this.autocomplete.el),
      this.typingEl,
      this.announcer,
      this.leftEl,
      this.errorEl,
      this.contextEl,
      this.composerEl,
    );
    this.files.wire(this.input, this.root);
    this.renderTyping();
    this.renderContext();
    this.autosize();
  }

  focusComposer() {
    if (this.input && !this.composerEl.hidden) this.input.focus();
  }

  // --- rendering ------------------------------------------------------------

  render() {
    if (!this.convId) return;
    this.renderHeader();
    this.renderMessages();
    // The quoted message of a reply may have loaded or changed.
    if (this.replyTo && !this.editing && this.contextQuote !== this.client.message(this.convId, this.replyTo)) this.renderContext();
  }

  renderHeader() {
    if (!this.convId) return;
    const { client } = this;
    const conv = client.convs.get(this.convId);
    const title = client.title(conv) || 'Conversation';
    this.titleEl.textContent = title;
    this.subtitleEl.textContent = this.subtitle(conv);
    const storm = client.storms.get(this.convId);
    this.stormEl.hidden = !storm;
    if (storm) {
      const secs = Math.max(1, Math.round((storm.windowMs || 1000) / 1000));
      this.stormEl.textContent = `Storm mode: this group is very busy (${storm.count} messages in ${plural(secs, 'second', 'seconds')}). New messages arrive in batches.`;
    }
    const left = Boolean(conv?.left);
    this.leftEl.hidden = !left;
    this.composerEl.hidden = left;
    if (left) this.contextEl.hidden = true;
    this.updateFloating();
  }

  subtitle(conv) {
    if (!conv) return '';
    if (conv.left) return 'You left this conversation';
    if (conv.kind === 'direct') {
      const peer = this.client.peerId(conv.id);
      const u = peer ? this.users.get(peer) : null;
      if (!u) return 'Direct message';
      return `${this.client.presence.isOnline(peer) ? 'Online' : 'Direct message'} · @${u.username}`;
    }
    return plural(conv.members_count ?? this.client.members.get(conv.id)?.size ?? 0, 'member', 'members');
  }

  renderMessages() {
    const { client, users } = this;
    const convId = this.convId;
    const conv = client.convs.get(convId);
    const tl = client.timeline(convId);
    const box = this.listEl;
    const atBottom = this.isAtBottom();
    const anchor = this.positioned && !atBottom ? this.captureAnchor() : null;
    const myId = client.me.id;
    const isGroup = conv?.kind === 'group';
    const msgs = tl.list().filter(isText);
    const markerSeq = this.markerSeq(tl);
    this.usernames = null;

    // The last own message that is stored carries the receipt in words.
    let lastOwn = null;
    for (let i = msgs.length - 1; i >= 0; i--) {
      if (msgs[i].from === myId) {
        lastOwn = msgs[i].seq;
        break;
      }
    }

    const frag = document.createDocumentFragment();
    if (tl.olderDone) {
      frag.append(h('p', { class: 'history-start' }, msgs.length ? 'This is the start of the conversation.' : 'No messages yet. Say hello!'));
    } else {
      frag.append(
        h(
          'button',
          { type: 'button', class: 'btn load-older', id: 'load-older', onClick: () => this.loadOlder() },
          tl.loadingOlder ? 'Loading…' : 'Load older messages',
        ),
      );
    }

    let prev = null;
    let group = null;
    const flush = () => {
      if (group) frag.append(group.el);
      group = null;
    };
    const startGroup = (from, ts, own) => {
      flush();
      const body = h('div', { class: 'group-body' });
      const el = h('div', { class: `msg-group ${own ? 'own' : 'other'}`, dataset: { from } });
      if (!own && isGroup) {
        el.append(h('span', { class: 'avatar small', style: `--hue:${hue(from)}`, 'aria-hidden': 'true' }, initials(users.name(from))));
      }
      if (!own) {
        body.append(
          h(
            'div',
            { class: 'group-head' },
            h('span', { class: 'sender', dir: 'auto' }, users.name(from)),
            h('time', { datetime: new Date(ts).toISOString(), title: formatFull(ts) }, formatTime(ts)),
          ),
        );
      }
      el.append(body);
      group = { el, body, from, ts };
    };

    for (const m of msgs) {
      const newDay = !prev || dayKey(prev.ts) !== dayKey(m.ts);
      if (newDay) {
        flush();
        frag.append(h('div', { class: 'day-sep', role: 'separator' }, h('span', null, dayLabel(m.ts))));
      }
      const marker = m.seq === markerSeq;
      if (marker) {
        flush();
        frag.append(h('div', { class: 'unread-marker', id: 'unread-marker', role: 'separator', tabindex: '-1' }, h('span', null, 'New messages')));
      }
      const own = m.from === myId;
      if (!group || newDay || marker || group.from !== m.from || m.ts - prev.ts > GROUP_GAP_MS) startGroup(m.from, m.ts, own);
      group.body.append(this.messageEl(m, own, m.seq === lastOwn));
      prev = m;
    }
    const pending = client.outbox.list(convId);
    if (pending.length) {
      if (!group || group.from !== myId) startGroup(myId, Date.now(), true);
      for (const item of pending) group.body.append(this.pendingEl(item));
    }
    flush();
    box.replaceChildren(frag);
    this.applyHighlight();
    if (this.msgCache.size > msgs.length + 200) {
      for (const seq of this.msgCache.keys()) if (!tl.has(seq)) this.msgCache.delete(seq);
    }

    if (!this.positioned) {
      // show() positions once the first pages are in.
    } else if (atBottom || this.stickNext) {
      box.scrollTop = box.scrollHeight;
    } else if (anchor) {
      this.restoreAnchor(anchor);
    }
    this.stickNext = false;
    // A first page that does not fill the view gives nothing to scroll:
    // fetch more right away.
    if (
      this.positioned &&
      !tl.olderDone &&
      !tl.loadingOlder &&
      Date.now() - (this.olderFailedAt ?? 0) > 5000 &&
      box.scrollHeight <= box.clientHeight + LOAD_OLDER_PX
    ) {
      this.loadOlder();
    }
    this.updateFloating();
    this.checkRead();
  }

  // markerSeq is the first message from someone else past the boundary, but
  // only when the range around the boundary is loaded (otherwise the jump
  // button offers to load it).
  markerSeq(tl) {
    if (this.boundary === null) return null;
    if (!(tl.lo <= this.boundary + 1 || tl.olderDone)) return null;
    for (const m of tl.list()) if (m.seq > this.boundary && m.from !== this.client.me.id && isText(m)) return m.seq;
    return null;
  }

  // messageEl reuses the element made for a seq while what it shows (the
  // receipt of an own message) is unchanged: a storm or a long history
  // then costs moving nodes, not rebuilding them.
  messageEl(m, own, lastOwn) {
    let key = `${this.usersVersion}:${this.client.myRole(this.convId)}`;
    if (own) {
      const r = this.client.receipt(this.convId, m.seq);
      key += `:${r.state}:${r.readers}:${lastOwn}`;
    }
    // A reply shows its quote's current state.
    const q = m.reply_to ? this.client.message(this.convId, m.reply_to) : null;
    const hit = this.msgCache.get(m.seq);
    if (hit && hit.key === key && hit.m === m && hit.q === q) return hit.el;
    const el = this.buildMessageEl(m, own, lastOwn);
    this.msgCache.set(m.seq, { key, m, q, el });
    return el;
  }

  // freshAttachments pulls m again for its files' links (they expire) and
  // keeps them on m for the next time it is drawn.
  async freshAttachments(m) {
    const page = await this.client.api.messagesAfter(this.convId, m.seq - 1, 1);
    const fresh = page.messages?.find((x) => x.seq === m.seq)?.attachments;
    if (fresh) m.attachments = fresh;
    return fresh ?? null;
  }

  buildMessageEl(m, own, lastOwn) {
    const children = [];
    if (m.reply_to && !m.deleted) children.push(quoteEl(this.client, this.users, this.convId, m.reply_to, (seq) => this.jumpTo(seq)));
    if (m.deleted) children.push(h('p', { class: 'msg-body deleted', dir: 'auto' }, 'This message was deleted'));
    else children.push(h('p', { class: 'msg-body', dir: 'auto' }, renderBody(m.body ?? '', this.bodyContext())));
    if (!m.deleted) children.push(attachmentsEl(m.attachments, () => this.freshAttachments(m)));
    const meta = h('span', { class: 'msg-meta' }, h('time', { datetime: new Date(m.ts).toISOString(), title: formatFull(m.ts) }, formatTime(m.ts)));
    if (m.edited_at && !m.deleted) meta.prepend(h('span', { class: 'msg-edited', title: `Edited ${formatFull(m.edited_at)}` }, '(edited)'));
    let status = null;
    let receipt = null;
    if (own) {
      const r = this.client.receipt(this.convId, m.seq);
      status = r.state;
      const words = receiptWords(r, this.client.convs.get(this.convId)?.kind);
      meta.append(h('span', { class: `msg-status ${r.state}`, 'aria-label': words, title: words }, r.state === 'sent' ? '✓' : '✓✓'));
      if (lastOwn) receipt = h('span', { class: 'msg-receipt', dataset: { status: r.state } }, words);
    }
    children.push(meta);
    const mentioned = !own && this.client.mentionsMe(m);
    const el = h(
      'div',
      {
        class: `msg${m.kind && m.kind !== 'text' ? ` kind-${m.kind}` : ''}${m.deleted ? ' deleted' : ''}${mentioned ? ' mentioned' : ''}`,
        dataset: { seq: String(m.seq), cmid: m.client_msg_id ?? '', status: status ?? '' },
        // A tap shows the actions on touch screens, which have no hover.
        onClick: (e) => {
          if (e.target.closest('a, button')) return;
          for (const x of this.listEl.querySelectorAll('.msg.actions-open')) if (x !== el) x.classList.remove('actions-open');
          el.classList.toggle('actions-open');
        },
      },
      h('div', { class: 'bubble' }, ...children),
      m.deleted ? null : this.actionsFor(m, own),
      reactionsEl(m, {
        me: this.client.me.id,
        name: (id) => this.users.name(id),
        onToggle: (emoji, on) => this.react(m.seq, emoji, on),
        onAdd: (anchor) => this.pickReaction(m.seq, anchor),
      }),
      receipt,
    );
    return el;
  }

  // --- message actions (v1.1) ---------------------------------------------------

  bodyContext() {
    if (!this.usernames) {
      this.usernames = new Set();
      for (const u of this.users.byId.values()) if (u.username) this.usernames.add(u.username.toLowerCase());
    }
    const names = this.usernames;
    return {
      isUser: (n) => names.has(n),
      me: (this.client.me.username ?? '').toLowerCase(),
      all: this.client.convs.get(this.convId)?.kind === 'group',
    };
  }

  actionsFor(m, own) {
    const conv = this.client.convs.get(this.convId);
    if (!conv || conv.left) return null;
    const role = this.client.myRole(this.convId);
    const canModerate = conv.kind === 'group' && (role === 'owner' || role === 'admin');
    return actionsEl({
      canEdit: own,
      canDelete: own || canModerate,
      onReact: (anchor) => this.pickReaction(m.seq, anchor),
      onReply: () => this.startReply(m.seq),
      onEdit: () => this.startEdit(m.seq),
      onDelete: () => this.confirmDelete(m.seq),
    });
  }

  pickReaction(seq, anchor) {
    openPicker(anchor, (emoji) => {
      const m = this.client.timeline(this.convId).msgs.get(seq);
      const mine = m?.reactions?.some((r) => r.emoji === emoji && r.users.includes(this.client.me.id));
      this.react(seq, emoji, !mine);
    });
  }

  react(seq, emoji, on) {
    this.mutate({ kind: 'reaction', target: seq, emoji, on });
  }

  async confirmDelete(seq) {
    const convId = this.convId;
    const ok = await confirmDialog('Delete this message for everyone? This cannot be undone.', 'Delete');
    if (ok) this.mutate({ kind: 'delete', target: seq }, convId);
  }

  async mutate(fields, convId = this.convId) {
    try {
      await this.client.mutate(convId, fields);
    } catch (err) {
      // A reaction that conflicts already happened (a double click,
      // another tab); anything else is worth telling.
      if (fields.kind === 'reaction' && err.code === 'conflict') return;
      const what = { reaction: 'react', edit: 'save the edit', delete: 'delete the message' }[fields.kind] ?? fields.kind;
      const why = err.code === 'conflict' ? 'the message was deleted.' : err.message;
      this.client.emit('notice', `Could not ${what}: ${why}`);
    }
  }

  startReply(seq) {
    if (this.editing) this.cancelEdit();
    this.replyTo = seq;
    this.saveDraft();
    this.renderContext();
    this.focusComposer();
  }

  cancelReply() {
    this.replyTo = null;
    this.saveDraft();
    this.renderContext();
  }

  // startEdit puts a message's text in the composer; what was being written
  // (and the message it replied to) is set aside until the edit ends.
  startEdit(seq) {
    const m = this.client.timeline(this.convId).msgs.get(seq);
    if (!m || m.deleted || m.from !== this.client.me.id) return;
    if (!this.editing) {
      this.editDraft = this.input.value;
      this.editReplyTo = this.replyTo;
    }
    this.replyTo = null;
    this.editing = { seq, body: m.body ?? '' };
    this.input.value = m.body ?? '';
    this.showError('');
    this.autosize();
    this.renderContext();
    this.focusComposer();
    this.input.setSelectionRange(this.input.value.length, this.input.value.length);
  }

  cancelEdit() {
    if (!this.editing) return;
    this.editing = null;
    this.input.value = this.editDraft ?? '';
    this.replyTo = this.editReplyTo ?? null;
    this.editDraft = '';
    this.editReplyTo = null;
    this.showError('');
    this.autosize();
    this.renderContext();
  }

  // saveEdit sends an edit and leaves edit mode only once the server has
  // it: a failed edit (offline, too long, the message deleted meanwhile)
  // keeps the text in the composer, with the reason above it.
  async saveEdit(body) {
    const editing = this.editing;
    if (editing.saving) return;
    if (!body.trim() || body === editing.body) {
      this.cancelEdit();
      return;
    }
    if (this.refuseTooLong(body)) return;
    const convId = this.convId;
    editing.saving = true;
    this.showError('');
    this.composerEl.setAttribute('aria-busy', 'true');
    try {
      await this.client.mutate(convId, { kind: 'edit', target: editing.seq, body });
      if (this.editing === editing) this.cancelEdit();
    } catch (err) {
      const why = `Could not save the edit: ${failureText(err)}`;
      if (this.editing === editing) this.showError(why);
      else this.client.emit('notice', why);
    } finally {
      editing.saving = false;
      this.composerEl?.removeAttribute('aria-busy');
    }
  }

  // showError says under the composer's context why the text was not sent
  // (empty text hides it).
  showError(text) {
    if (!this.errorEl) return;
    this.errorEl.textContent = text;
    this.errorEl.hidden = !text;
    if (text) this.input.setAttribute('aria-invalid', 'true');
    else this.input.removeAttribute('aria-invalid');
  }

  // refuseTooLong checks a body against the server's limit before it is
  // sent: a refused send could only be discarded, text and all.
  refuseTooLong(body) {
    const over = bodyTooLong(body);
    if (over) this.showError(over);
    return Boolean(over);
  }

  // renderContext shows what the composer is doing besides writing a new
  // message: editing one, or replying to one.
  renderContext() {
    const el = this.contextEl;
    if (!el) return;
    const cancel = (fn) => h('button', { type: 'button', class: 'btn icon context-cancel', id: 'context-cancel', 'aria-label': 'Cancel', title: 'Cancel (Esc)', onClick: fn }, '×');
    this.composerEl.classList.toggle('editing', Boolean(this.editing));
    this.composerEl.querySelector('#send-btn').textContent = this.editing ? 'Save' : 'Send';
    if (this.editing) {
      el.dataset.mode = 'edit';
      el.replaceChildren(h('span', { class: 'context-label' }, 'Editing message'), h('span', { class: 'context-hint' }, 'Esc to cancel, Enter to save'), cancel(() => this.cancelEdit()));
    } else if (this.replyTo) {
      const q = this.client.message(this.convId, this.replyTo);
      // A reply kept with a draft may name a message not loaded yet.
      if (!q) this.client.fetchQuote(this.convId, this.replyTo);
      const shown = q && !q.missing;
      this.contextQuote = q;
      el.dataset.mode = 'reply';
      el.dataset.replyTo = String(this.replyTo);
      el.replaceChildren(
        h('span', { class: 'context-label', dir: 'auto' }, `Replying to ${shown ? this.users.name(q.from) : 'a message'}`),
        h('span', { class: 'context-quote', dir: 'auto' }, shown ? (q.deleted ? 'This message was deleted' : preview(q.body, 100)) : ''),
        cancel(() => this.cancelReply()),
      );
    }
    el.hidden = (!this.editing && !this.replyTo) || Boolean(this.client.convs.get(this.convId)?.left);
  }

  mentionCandidates() {
    const conv = this.client.convs.get(this.convId);
    const out = [];
    for (const id of this.client.members.get(this.convId)?.keys() ?? []) {
      if (id === this.client.me.id) continue;
      const u = this.users.get(id);
      if (u) out.push({ id, username: u.username, name: u.display_name || u.username });
    }
    out.sort((a, b) => a.name.localeCompare(b.name));
    if (conv?.kind === 'group') out.push({ id: null, username: 'all', name: 'Everyone here' });
    return out;
  }

  renderTyping() {
    if (!this.typingEl) return;
    const ids = this.client.presence.typing(this.convId);
    const text = typingText(ids.map((id) => this.users.name(id)));
    if (this.typingEl.textContent !== text) this.typingEl.textContent = text;
  }

  pendingEl(item) {
    const failed = item.status === 'failed';
    const meta = failed
      ? h(
          'span',
          { class: 'msg-meta failed' },
          h('span', { class: 'send-error', role: 'alert' }, `Not sent: ${item.error}`),
          h('button', { type: 'button', class: 'link retry-btn', onClick: () => this.client.outbox.retry(this.convId, item.cmid) }, 'Retry'),
          h('button', { type: 'button', class: 'link discard-btn', onClick: () => this.client.outbox.discard(this.convId, item.cmid) }, 'Discard'),
        )
      : h('span', { class: 'msg-meta' }, h('span', { class: 'msg-status sending' }, 'Sending…'));
    return h(
      'div',
      { class: `msg pending ${item.status}`, dataset: { cmid: item.cmid, status: item.status } },
      h(
        'div',
        { class: 'bubble' },
        item.extra?.reply_to ? quoteEl(this.client, this.users, this.convId, item.extra.reply_to, (seq) => this.jumpTo(seq)) : null,
        h('p', { class: 'msg-body', dir: 'auto' }, linkify(item.body)),
        attachmentsEl(item.files),
        meta,
      ),
    );
  }

  // --- scrolling --------------------------------------------------------------

  isAtBottom() {
    const box = this.listEl;
    if (!box) return true;
    return box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
  }

  captureAnchor() {
    const top = this.listEl.getBoundingClientRect().top;
    for (const el of this.listEl.querySelectorAll('.msg[data-seq]')) {
      const r = el.getBoundingClientRect();
      if (r.bottom > top) return { seq: el.dataset.seq, offset: r.top - top };
    }
    return null;
  }

  restoreAnchor(anchor) {
    const el = this.listEl.querySelector(`.msg[data-seq="${anchor.seq}"]`);
    if (!el) return;
    const top = this.listEl.getBoundingClientRect().top;
    this.listEl.scrollTop += el.getBoundingClientRect().top - top - anchor.offset;
  }

  positionInitially() {
    const marker = this.listEl.querySelector('#unread-marker');
    if (marker) this.listEl.scrollTop = Math.max(0, marker.offsetTop - 48);
    else this.listEl.scrollTop = this.listEl.scrollHeight;
  }

  onScrolled() {
    if (!this.convId || !this.positioned) return;
    const tl = this.client.timeline(this.convId);
    if (this.listEl.scrollTop < LOAD_OLDER_PX && !tl.olderDone && !tl.loadingOlder && Date.now() - (this.olderFailedAt ?? 0) > 2000) {
      this.loadOlder();
    }
    if (this.isAtBottom() && tl.size > KEEP_OPEN && tl.trim(KEEP_OPEN / 2)) this.renderer.schedule();
    this.updateFloating();
    this.checkRead();
  }

  loadOlder() {
    if (!this.convId) return Promise.resolve();
    const convId = this.convId;
    const p = this.client.loadOlder(convId).catch((err) => {
      this.olderFailedAt = Date.now();
      // Offline: the button stays, and scrolling or a click tries again.
      if (!err.network) this.client.emit('notice', `Could not load older messages: ${err.message}`);
      if (convId === this.convId) this.renderer.schedule();
    });
    this.renderer.schedule();
    return p;
  }

  updateFloating() {
    if (!this.convId || !this.listEl) return;
    const conv = this.client.convs.get(this.convId);
    const atBottom = this.isAtBottom();
    this.jumpLatestEl.hidden = atBottom;
    const unread = conv?.unread || 0;
    this.jumpLatestEl.textContent = unread ? `↓ ${plural(unread, 'new message', 'new messages')}` : '↓ Latest';
    // The jump button offers the "new messages" line until it has been on
    // screen once: not loaded yet (far back), or scrolled past unseen.
    let showJump = false;
    if (this.boundary !== null && this.positioned && !this.markerSeen) {
      const marker = this.listEl.querySelector('#unread-marker');
      if (!marker) {
        const tl = this.client.timeline(this.convId);
        showJump = !tl.olderDone && tl.lo > this.boundary + 1;
      } else {
        const r = marker.getBoundingClientRect();
        const box = this.listEl.getBoundingClientRect();
        if (r.bottom > box.top && r.top < box.bottom) this.markerSeen = true;
        else showJump = r.bottom <= box.top;
      }
    }
    this.jumpUnreadEl.hidden = !showJump;
  }

  async jumpToUnread() {
    const convId = this.convId;
    if (this.boundary === null) return;
    this.jumpUnreadEl.textContent = 'Loading…';
    await this.client.ensureLoaded(convId, this.boundary + 1).catch(() => {});
    this.jumpUnreadEl.textContent = '↑ Jump to first unread';
    if (this.convId !== convId) return;
    this.render();
    const marker = this.listEl.querySelector('#unread-marker');
    if (marker) {
      this.listEl.scrollTop = Math.max(0, marker.offsetTop - 48);
      marker.focus({ preventScroll: true });
    }
    this.updateFloating();
  }

  jumpToLatest() {
    this.listEl.scrollTop = this.listEl.scrollHeight;
    this.updateFloating();
    this.checkRead();
    this.focusComposer();
  }

  // checkRead reports the newest message the person can see, when the window
  // is visible and focused: that is what "read" means.
  checkRead() {
    if (!this.convId || !this.positioned || !this.attentive() || !this.listEl) return;
    const box = this.listEl.getBoundingClientRect();
    if (box.height === 0) return;
    const els = this.listEl.querySelectorAll('.msg[data-seq]');
    for (let i = els.length - 1; i >= 0; i--) {
      const r = els[i].getBoundingClientRect();
      if (r.top < box.bottom - Math.min(r.height, 16) && r.bottom > box.top) {
        let seq = Number(els[i].dataset.seq);
        // The newest message on screen also covers the edits and
        // reactions after it: they are seqs too, and not shown as such.
        if (i === els.length - 1) seq = Math.max(seq, this.client.timeline(this.convId).maxSeq());
        this.client.markRead(this.convId, seq);
        return;
      }
      if (r.bottom <= box.top) return;
    }
  }

  // --- composer ---------------------------------------------------------------

  onComposerKey(e) {
    if (this.autocomplete.onKey(e)) return;
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      this.submit();
    } else if (e.key === 'Escape' && (this.editing || this.replyTo)) {
      e.preventDefault();
      e.stopPropagation();
      if (this.editing) this.cancelEdit();
      else this.cancelReply();
    } else if (e.key === 'ArrowUp' && !this.input.value && !this.editing && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey) {
      // Up on an empty composer edits my last message, as in Slack.
      const mine = this.client.timeline(this.convId).list().findLast((m) => isText(m) && m.from === this.client.me.id && !m.deleted);
      if (mine) {
        e.preventDefault();
        this.startEdit(mine.seq);
      }
    }
  }

  onComposerInput() {
    this.autosize();
    // An error about the text goes once the text changes; one about its
    // length stays while it is still too long.
    if (this.errorEl && !this.errorEl.hidden) this.showError(bodyTooLong(this.input.value) ?? '');
    if (this.convId && !this.editing) {
      this.saveDraft();
      if (this.input.value.trim()) this.client.typing(this.convId);
    }
  }

  onSubmit(e) {
    e.preventDefault();
    this.submit();
  }

  submit() {
    const body = this.input.value.replace(/^\s*\n/, '').replace(/\s+$/, '');
    if (this.editing) {
      this.saveEdit(body);
      return;
    }
    if (this.files.uploading) {
      this.client.emit('notice', 'Wait for the uploads to finish.');
      return;
    }
    const files = this.files.ready();
    if ((!body.trim() && !files.length) || !this.convId) return;
    if (this.refuseTooLong(body)) return;
    const extra = {};
    if (this.replyTo) extra.reply_to = this.replyTo;
    if (files.length) extra.attachments = files.map((f) => f.id);
    this.client.outbox.send(this.convId, body.trim() ? body : '', extra, files);
    if (this.replyTo) this.cancelReply();
    this.files.clear();
    this.input.value = '';
    this.showError('');
    this.drafts.delete(this.convId);
    this.autosize();
    this.stickNext = true;
    this.renderer.schedule();
    this.input.focus();
  }

  autosize() {
    const el = this.input;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(el.scrollHeight, 200)}px`;
  }
}

// failureText says why a request failed, in words for the composer.
function failureText(err) {
  if (err.network) return 'no connection. Your text is kept; try again when you are back online.';
  if (err.code === 'too_large') return 'the message is too long.';
  if (err.code === 'conflict') return 'the message was deleted.';
  if (err.code === 'rate_limited') return 'sending too fast, try again in a moment.';
  return err.message || 'the server refused it.';
}

function receiptWords(r, kind) {
  switch (r.state) {
    case 'read':
      return kind === 'group' ? `Read by ${r.readers}` : 'Read';
    case 'partial':
      return `Read by ${r.readers}`;
    case 'delivered':
      return 'Delivered';
    default:
      return 'Sent';
  }
}
