// Parts of a message bubble added by v1.1: the quote of the message a reply
// answers, and the action bar (react, reply, edit, delete).

import { h } from './dom.js';
import { preview } from './format.js';

// quoteEl shows the message seq of conv that m replies to: its sender and
// a snippet, or why it cannot be shown. A click jumps to it.
export function quoteEl(client, users, convId, seq, onJump) {
  const q = client.message(convId, seq);
  if (!q) client.fetchQuote(convId, seq);
  let who = '';
  let text;
  if (!q) text = 'Loading…';
  else if (q.missing) text = 'This message is not available.';
  else if (q.deleted) text = 'This message was deleted';
  else {
    who = users.name(q.from);
    text = preview(q.body, 140) || ' ';
  }
  return h(
    'button',
    {
      type: 'button',
      class: `quote${q?.deleted ? ' deleted' : ''}`,
      dataset: { replyTo: String(seq) },
      title: 'Show the original message',
      onClick: (e) => {
        e.stopPropagation();
        onJump(seq);
      },
    },
    who ? h('span', { class: 'quote-sender', dir: 'auto' }, who) : null,
    h('span', { class: 'quote-text', dir: 'auto' }, text),
  );
}

// actionsEl is the toolbar shown on hover, focus or a tap of the message.
export function actionsEl({ canEdit, canDelete, onReact, onReply, onEdit, onDelete }) {
  const btn = (cls, label, icon, fn) =>
    h('button', { type: 'button', class: `act ${cls}`, title: label, 'aria-label': label, onClick: (e) => { e.stopPropagation(); fn(e.currentTarget); } }, icon);
  return h(
    'div',
    { class: 'msg-actions', role: 'toolbar', 'aria-label': 'Message actions' },
    btn('act-react', 'Add reaction', '☺', onReact),
    btn('act-reply', 'Reply', '↩', onReply),
    canEdit ? btn('act-edit', 'Edit', '✎', onEdit) : null,
    canDelete ? btn('act-delete', 'Delete', trashIcon(), onDelete) : null,
  );
}

// trashIcon is drawn, not a character: not every system has a font with 🗑.
function trashIcon() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 16 16');
  svg.setAttribute('width', '15');
  svg.setAttribute('height', '15');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', 'M2.5 4h11M6 4V2.5h4V4M4 4l.7 9.5h6.6L12 4M6.6 6.5v5M9.4 6.5v5');
  path.setAttribute('fill', 'none');
  path.setAttribute('stroke', 'currentColor');
  path.setAttribute('stroke-width', '1.4');
  path.setAttribute('stroke-linejoin', 'round');
  svg.append(path);
  return svg;
}
