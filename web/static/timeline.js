// Timeline holds the messages of one conversation that this tab knows, keyed
// by seq so that a message seen twice (live and again through sync) is kept
// once.
//
// [lo, hi] is the range known to be complete: every visible message with a
// seq in it is in `msgs`. Messages above hi may be present too (live ones that
// arrived past a gap) until a pull fills or confirms the gap.

export class Timeline {
  constructor(convId, hi = 0) {
    this.conv = convId;
    this.msgs = new Map();
    this.sortedCache = null;
    this.hi = hi;
    this.lo = hi + 1;
    this.olderDone = false;
    this.loadingOlder = null;
    this.pulling = false;
    this.pullAgain = false;
  }

  get size() {
    return this.msgs.size;
  }

  has(seq) {
    return this.msgs.has(seq);
  }

  // add stores m and reports whether it is new.
  add(m) {
    if (this.msgs.has(m.seq)) return false;
    this.msgs.set(m.seq, m);
    this.sortedCache = null;
    return true;
  }

  // replace swaps in a new state of a message held (a mutation folded in).
  replace(m) {
    if (!this.msgs.has(m.seq)) return;
    this.msgs.set(m.seq, m);
    this.sortedCache = null;
  }

  list() {
    if (!this.sortedCache) this.sortedCache = [...this.msgs.values()].sort((a, b) => a.seq - b.seq);
    return this.sortedCache;
  }

  maxSeq() {
    const l = this.list();
    return l.length ? l[l.length - 1].seq : 0;
  }

  minSeq() {
    const l = this.list();
    return l.length ? l[0].seq : 0;
  }

  // advance moves hi over messages that directly follow it.
  advance() {
    while (this.msgs.has(this.hi + 1)) this.hi++;
  }

  // markOlder records a backwards page: its first seq is the new lower bound.
  markOlder(messages, completed) {
    if (messages.length) this.lo = Math.min(this.lo, messages[0].seq);
    if (completed) this.olderDone = true;
  }

  // clear forgets everything at or below maxSeq (after "clear history").
  clear(maxSeq) {
    for (const seq of [...this.msgs.keys()]) if (seq <= maxSeq) this.msgs.delete(seq);
    this.sortedCache = null;
    this.hi = Math.max(this.hi, maxSeq);
    this.lo = maxSeq + 1;
    this.olderDone = true;
  }

  // trim keeps the newest `keep` messages so a busy conversation does not
  // grow without bound; paging back loads the rest again.
  trim(keep) {
    const l = this.list();
    if (l.length <= keep) return false;
    const cut = l[l.length - keep].seq;
    for (const m of l) {
      if (m.seq >= cut) break;
      this.msgs.delete(m.seq);
    }
    this.sortedCache = null;
    this.lo = Math.max(this.lo, cut);
    this.olderDone = false;
    return true;
  }
}
