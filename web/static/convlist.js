// The conversation list: names, previews, unread counts, newest activity first.

import { h } from './dom.js';
import { Coalescer } from './util.js';
import { hue, initials, listTime, preview } from './format.js';
import { isMuted } from './notify.js';
import { fileSummary } from './files.js';

export class ConvList {
  constructor(client, users, { onNewDirect, onNewGroup }) {
    this.client = client;
    this.users = users;
    this.activeId = null;
    this.filter = '';
    this.filterEl = h('input', {
      type: 'search',
      id: 'conv-filter',
      class: 'input',
      placeholder: 'Filter conversations',
      'aria-label': 'Filter conversations',
      'aria-keyshortcuts': 'Control+K',
      autocomplete: 'off',
      onInput: (e) => {
        this.filter = e.target.value.trim().toLowerCase();
        this.renderer.schedule();
      },
    });
    this.listEl = h('ul', { class: 'conv-list', id: 'conv-list', 'aria-label': 'Conversations' });
    this.emptyEl = h('p', { class: 'conv-empty', hidden: true });
    this.root = h(
      'nav',
      { class: 'sidebar', 'aria-label': 'Conversations' },
      h(
        'div',
        { class: 'sidebar-tools' },
        this.filterEl,
        h(
          'div',
          { class: 'sidebar-buttons' },
          h('button', { type: 'button', class: 'btn', id: 'new-direct', onClick: onNewDirect }, 'New chat'),
          h('button', { type: 'button', class: 'btn', id: 'new-group', onClick: onNewGroup }, 'New group'),
        ),
      ),
      this.listEl,
      this.emptyEl,
    );
    this.listEl.addEventListener('keydown', (e) => this.onKey(e));
    this.renderer = new Coalescer(() => this.render());
    for (const ev of ['convs', 'members', 'storm']) client.on(ev, () => this.renderer.schedule());
    users.on('change', () => this.renderer.schedule());
    client.presence.on('presence', () => this.renderer.schedule());
  }

  setActive(id) {
    this.activeId = id;
    this.renderer.schedule();
  }

  focusFilter() {
    this.filterEl.focus();
    this.filterEl.select();
  }

  // Arrow keys move between conversations, as in a list box.
  onKey(e) {
    if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
    const links = [...this.listEl.querySelectorAll('.conv-item')];
    const i = links.indexOf(document.activeElement);
    if (i < 0) return;
    e.preventDefault();
    links[Math.max(0, Math.min(links.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)))]?.focus();
  }

  ordered() {
    const all = this.client.sortedConvs();
    if (!this.filter) return all;
    return all.filter((c) => this.client.title(c).toLowerCase().includes(this.filter));
  }

  // neighbour returns the id of the conversation before or after the active one.
  neighbour(step) {
    const list = this.ordered();
    const i = list.findIndex((c) => c.id === this.activeId);
    const next = list[i < 0 ? 0 : i + step];
    return next?.id ?? null;
  }

  render() {
    const { client } = this;
    const focusedId = this.listEl.contains(document.activeElement) ? document.activeElement.dataset.convId : null;
    const convs = this.ordered();
    const items = convs.map((c) => this.item(c));
    this.listEl.replaceChildren(...items);
    if (focusedId) this.listEl.querySelector(`[data-conv-id="${CSS.escape(focusedId)}"]`)?.focus();
    this.emptyEl.hidden = convs.length > 0;
    if (!convs.length) {
      this.emptyEl.textContent = this.filter
        ? 'No conversation matches.'
        : client.synced
          ? 'No conversations yet. Start one with “New chat”.'
          : 'Loading conversations…';
    }
  }

  item(conv) {
    const { client, users } = this;
    const title = client.title(conv);
    const last = conv.last_message && conv.last_message.seq >= (conv.min_seq ?? 0) ? conv.last_message : null;
    let who = '';
    if (last) {
      if (last.from === client.me.id) who = 'You: ';
      else if (conv.kind === 'group') who = `${users.name(last.from)}: `;
    }
    const unread = conv.left ? 0 : conv.unread || 0;
    const mentions = conv.left ? 0 : conv.mentions || 0;
    const peer = conv.kind === 'direct' ? client.peerId(conv.id) : null;
    const online = Boolean(peer && !conv.left && client.presence.isOnline(peer));
    const storming = client.storms.has(conv.id);
    const avatarKey = conv.kind === 'direct' ? (client.peerId(conv.id) ?? conv.id) : conv.id;
    const label = [title, online ? 'online' : '', unread ? `${unread} unread` : '', mentions ? `${mentions} ${mentions === 1 ? 'mention' : 'mentions'}` : '', conv.left ? 'left' : '']
      .filter(Boolean)
      .join(', ');
    return h(
      'li',
      null,
      h(
        'a',
        {
          class: `conv-item${conv.id === this.activeId ? ' active' : ''}${unread ? ' has-unread' : ''}${conv.left ? ' left' : ''}`,
          href: `#/c/${encodeURIComponent(conv.id)}`,
          dataset: { convId: conv.id, kind: conv.kind },
          'aria-current': conv.id === this.activeId ? 'page' : null,
          'aria-label': label,
        },
        h(
          'span',
          {
            class: `avatar${conv.kind === 'group' ? ' group' : ''}`,
            style: `--hue:${hue(avatarKey)}`,
            'aria-hidden': 'true',
          },
          initials(title),
          peer ? h('span', { class: `presence-dot${online ? ' online' : ''}`, dataset: { userId: peer } }) : null,
        ),
        h(
          'span',
          { class: 'conv-main' },
          h(
            'span',
            { class: 'conv-top' },
            h('span', { class: 'conv-name', dir: 'auto' }, title),
            isMuted(conv) ? h('span', { class: 'conv-muted', title: 'Muted', 'aria-label': 'Muted' }, '🔕') : null,
            storming ? h('span', { class: 'storm-badge', title: 'Storm mode' }, 'storm') : null,
            h('time', { class: 'conv-time' }, last ? listTime(last.ts) : ''),
          ),
          h(
            'span',
            { class: 'conv-bottom' },
            h('span', { class: 'conv-preview', dir: 'auto' }, conv.left ? 'You left this conversation' : last ? who + (last.deleted ? 'This message was deleted' : preview(last.body || fileSummary(last))) : ''),
            mentions ? h('span', { class: 'badge conv-mentions', title: 'Mentions of you', dataset: { mentions: String(mentions) } }, `@${mentions > 99 ? '99+' : mentions}`) : null,
            unread
              ? h('span', { class: 'badge conv-unread', dataset: { unread: String(unread) } }, unread > 999 ? '999+' : String(unread))
              : null,
          ),
        ),
      ),
    );
  }
}
