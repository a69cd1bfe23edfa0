// Edits, deletions and reactions are messages of their own (PROTOCOL.md
// v1.1, "One stream per conversation"): they come with seqs, live and in
// pulls, like text. The client never shows them as bubbles; it folds each
// into the text message it names in `target`, if it holds that message.
//
// A text message that comes from a pull or a page is already folded: it
// shows every mutation up to the answer's max_seq. That bound is kept on
// the message (asOf), and only mutations past it are folded in; otherwise an
// older edit seen later (paging back) would undo a newer one.

export const MUTATION_KINDS = new Set(['edit', 'delete', 'reaction']);

export function isMutation(m) {
  return MUTATION_KINDS.has(m?.kind);
}

// isText is a message that is shown as a bubble and counts as unread.
export function isText(m) {
  return !m.kind || m.kind === 'text';
}

// fold returns the target as changed by mutation m (a new object, so views
// that cache by identity notice), or null when m changes nothing.
export function fold(target, m) {
  if (!target || !isText(target) || !(m.seq > asOf(target))) return null;
  switch (m.kind) {
    case 'edit':
      if (target.deleted) return null;
      return { ...target, asOf: m.seq, body: m.body ?? '', edited_at: m.ts, mentions: m.mentions ?? [] };
    case 'delete':
      if (target.deleted) return null;
      return { ...target, asOf: m.seq, body: '', deleted: true, reactions: [], attachments: [], mentions: [], edited_at: undefined };
    case 'reaction': {
      if (target.deleted || !m.emoji) return null;
      const reactions = (target.reactions ?? []).map((r) => ({ emoji: r.emoji, users: [...(r.users ?? [])] }));
      let r = reactions.find((x) => x.emoji === m.emoji);
      if (m.on) {
        if (r?.users.includes(m.from)) return null;
        if (!r) {
          r = { emoji: m.emoji, users: [] };
          reactions.push(r);
        }
        r.users.push(m.from);
      } else {
        if (!r || !r.users.includes(m.from)) return null;
        r.users = r.users.filter((u) => u !== m.from);
      }
      return { ...target, asOf: m.seq, reactions: reactions.filter((x) => x.users.length) };
    }
    default:
      return null;
  }
}

// asOf is the seq up to which a message's state is known.
export function asOf(m) {
  return m.asOf ?? m.seq;
}
