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
    who ? h('span', { class: 'quote-sender' }, who) : null,
    h('span', { class: 'quote-text' }, text),
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
    canDelete ? btn('act-delete', 'Delete', '🗑', onDelete) : null,
  );
}
