// Drafts: what a person wrote in a conversation's composer and has not sent,
// with the message it replies to. They are kept in localStorage (as the
// outbox keeps unconfirmed sends) so that a reload or a crash does not lose
// them, under a key of the logged-in user: another account on the same
// browser does not see them, and logging out removes them.

export function draftsKey(userId) {
  return `imserver.drafts.${userId}`;
}

export class Drafts {
  constructor(userId) {
    this.key = draftsKey(userId);
  }

  load() {
    try {
      return JSON.parse(localStorage.getItem(this.key) || '{}') ?? {};
    } catch {
      return {};
    }
  }

  // get returns { body, replyTo } of a conversation (empty when none).
  get(convId) {
    const d = this.load()[convId];
    return { body: typeof d?.body === 'string' ? d.body : '', replyTo: Number(d?.reply_to) || null };
  }

  // set keeps a draft, or removes it when there is nothing to keep.
  // Read-modify-write keeps what other tabs of the same person saved.
  set(convId, body, replyTo) {
    if (!convId) return;
    const all = this.load();
    if (body.trim() || replyTo) all[convId] = replyTo ? { body, reply_to: replyTo } : { body };
    else if (convId in all) delete all[convId];
    else return;
    try {
      if (Object.keys(all).length) localStorage.setItem(this.key, JSON.stringify(all));
      else localStorage.removeItem(this.key);
    } catch {
      // Storage full or disabled: the draft stays in the composer.
    }
  }

  delete(convId) {
    this.set(convId, '', null);
  }
}
