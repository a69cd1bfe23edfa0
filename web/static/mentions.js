// Mentions: `@username` and `@all` in message bodies (the server resolves
// them into `mentions`, PROTOCOL.md v1.1), shown highlighted, and the `@`
// autocomplete of the composer.

import { h, linkify } from './dom.js';
import { hue, initials } from './format.js';

// Usernames are ASCII letters, digits, '_', '-' and '.' (chat/accounts.go).
const MENTION_RE = /(^|[^\w@.-])@([A-Za-z0-9_.-]{1,32})/g;

// renderBody turns a message body into nodes: links, and @mentions of
// people we know as highlighted spans (mine stand out more). Text stays
// text nodes throughout: nothing is parsed as HTML.
//   isUser(name) -> bool: a known username (lowercase)
//   me: my username (lowercase); all: whether @all counts here (groups)
export function renderBody(text, { isUser, me, all }) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(MENTION_RE)) {
    let name = m[2];
    // "@bob." ends a sentence: the dot is not part of the name.
    while (name && !isUser(name.toLowerCase()) && /[.-]$/.test(name)) name = name.slice(0, -1);
    const lower = name.toLowerCase();
    const isAll = lower === 'all' && all;
    if (!name || (!isAll && !isUser(lower))) continue;
    const start = m.index + m[1].length;
    if (start > last) out.push(...linkify(text.slice(last, start)));
    const mine = isAll || lower === me;
    out.push(h('span', { class: `mention${mine ? ' mention-me' : ''}`, dataset: { username: lower } }, `@${name}`));
    last = start + 1 + name.length;
  }
  if (last < text.length) out.push(...linkify(text.slice(last)));
  return out;
}

// Autocomplete watches a textarea for "@prefix" right before the caret and
// offers matching members in a list box; arrows move, Enter or Tab picks,
// Escape closes. candidates() returns [{username, name, id}].
export class Autocomplete {
  constructor(input, candidates) {
    this.input = input;
    this.candidates = candidates;
    this.items = [];
    this.index = 0;
    this.range = null;
    this.el = h('ul', { class: 'mention-popup', id: 'mention-popup', role: 'listbox', 'aria-label': 'People to mention', hidden: true });
    this.el.addEventListener('mousedown', (e) => e.preventDefault()); // keep the composer's focus
    input.setAttribute('aria-autocomplete', 'list');
    input.setAttribute('aria-controls', 'mention-popup');
    input.addEventListener('input', () => this.update());
    input.addEventListener('click', () => this.update());
    input.addEventListener('blur', () => this.close());
  }

  get open() {
    return !this.el.hidden;
  }

  update() {
    const { input } = this;
    const caret = input.selectionStart;
    if (caret !== input.selectionEnd) return this.close();
    const before = input.value.slice(0, caret);
    const m = before.match(/(^|[^\w@.-])@([A-Za-z0-9_.-]{0,32})$/);
    if (!m) return this.close();
    const prefix = m[2].toLowerCase();
    const items = this.candidates()
      .filter((c) => c.username.toLowerCase().startsWith(prefix) || (c.name ?? '').toLowerCase().split(/\s+/).some((w) => w.startsWith(prefix)))
      .slice(0, 8);
    if (!items.length) return this.close();
    this.items = items;
    this.range = [caret - prefix.length - 1, caret];
    this.index = Math.min(this.index, items.length - 1);
    this.render();
  }

  render() {
    this.el.replaceChildren(
      ...this.items.map((c, i) =>
        h(
          'li',
          {
            role: 'option',
            id: `mention-opt-${i}`,
            class: `mention-option${i === this.index ? ' active' : ''}`,
            'aria-selected': i === this.index ? 'true' : 'false',
            dataset: { username: c.username },
            onClick: () => this.pick(i),
          },
          c.id ? h('span', { class: 'avatar tiny', style: `--hue:${hue(c.id)}`, 'aria-hidden': 'true' }, initials(c.name)) : h('span', { class: 'avatar tiny all', 'aria-hidden': 'true' }, '@'),
          h('span', { class: 'mention-name', dir: 'auto' }, c.name),
          h('span', { class: 'mention-handle' }, `@${c.username}`),
        ),
      ),
    );
    this.el.hidden = false;
    this.input.setAttribute('aria-activedescendant', `mention-opt-${this.index}`);
  }

  close() {
    this.el.hidden = true;
    this.items = [];
    this.index = 0;
    this.input.removeAttribute('aria-activedescendant');
  }

  // onKey handles the keys of an open list; true means the key was used.
  onKey(e) {
    if (!this.open) return false;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      const n = this.items.length;
      this.index = (this.index + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
      this.render();
    } else if ((e.key === 'Enter' || e.key === 'Tab') && !e.shiftKey && !e.isComposing) {
      this.pick(this.index);
    } else if (e.key === 'Escape') {
      this.close();
    } else return false;
    e.preventDefault();
    e.stopPropagation();
    return true;
  }

  pick(i) {
    const c = this.items[i];
    if (!c || !this.range) return;
    const { input } = this;
    const [from, to] = this.range;
    const insert = `@${c.username} `;
    input.value = input.value.slice(0, from) + insert + input.value.slice(to);
    const caret = from + insert.length;
    input.setSelectionRange(caret, caret);
    this.close();
    input.dispatchEvent(new Event('input', { bubbles: true }));
    input.focus();
  }
}
