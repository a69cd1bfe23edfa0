// ChatClient is the tab's model of the user's chat: the conversation list kept
// by incremental sync, a Timeline per conversation filled by live frames and
// pulls, members and receipts, storm state, and the batched read markers and
// acks. Views read it and listen to its events; they never talk to the
// server themselves.
//
// Events: 'convs', 'timeline' (convId), 'message' (convId, msg, live),
// 'pending' (convId), 'members' (convId), 'storm' (convId), 'conn' (state),
// 'notice' (text), 'mutation' (convId, msg, live): an edit, delete or
// reaction was folded into a message held (or a quoted one).

import { Emitter } from './util.js';
import { Socket } from './socket.js';
import { Timeline } from './timeline.js';
import { Outbox } from './outbox.js';
import { fold, isMutation, isText } from './mutations.js';
import { Presence, TYPING_EVERY_MS } from './presence.js';
import { newClientMsgId } from './util.js';

const CONV_PAGE = 500;
const PULL_PAGE = 500;
export const OLDER_PAGE = 50;
const PULLS_AT_ONCE = 2;
const ACK_EVERY = 20;
const ACK_DELAY_MS = 1000;
const READ_DELAY_MS = 300;
const CONV_SYNC_DELAY_MS = 300;
const CONV_SYNC_LAZY_MS = 2000;
const KEEP_BACKGROUND = 2000;
const KEEP_OPEN = 5000;

// wsURL opens the socket with a one-time ticket, never the token: URLs end
// up in proxies' access logs, and a ticket is worthless once used.
function wsURL(ticket) {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  return `${scheme}://${location.host}/api/v1/ws?ticket=${encodeURIComponent(ticket)}`;
}

export class ChatClient extends Emitter {
  constructor({ api, users, me, token }) {
    super();
    this.api = api;
    this.users = users;
    this.me = me;
    this.convs = new Map();
    this.version = 0;
    this.convSyncing = false;
    this.convSyncAgain = false;
    this.convSyncTimer = null;
    this.timelines = new Map();
    this.members = new Map();
    this.membersLoading = new Map();
    this.membersAgain = new Set();
    this.storms = new Map();
    this.pullQueue = new Set();
    this.pullsRunning = 0;
    this.readsPending = new Map();
    this.readTimer = null;
    this.acksPending = new Map();
    this.acksSent = new Map();
    this.ackCount = 0;
    this.ackTimer = null;
    this.openConv = null;
    this.conn = { state: 'stopped' };
    this.outbox = new Outbox(this, `imserver.outbox.${me.id}`);
    this.presence = new Presence();
    this.typingSent = new Map();
    // Quoted messages that are not in a timeline, fetched one by one.
    this.quotes = new Map();
    this.socket = new Socket({
      url: async () => wsURL((await this.api.ticket()).ticket),
      onFrame: (f) => this.onFrame(f),
      onState: (s) => {
        this.conn = s;
        if (s.state !== 'online') this.presence.offline();
        this.emit('conn', s);
      },
      // A socket that closes before its hello may have a revoked token: a
      // 401 from /me ends the session (the api calls onUnauthorized).
      onConnectFailed: () => this.api.me().catch(() => {}),
    });
  }

  // start connects and resolves once the conversation list is first loaded.
  start() {
    const first = this.syncConvs();
    this.socket.start();
    return first;
  }

  stop() {
    this.socket.stop();
    clearTimeout(this.readTimer);
    clearTimeout(this.ackTimer);
    clearTimeout(this.convSyncTimer);
    for (const t of this.memberTimers?.values() ?? []) clearTimeout(t);
  }

  // --- frames -------------------------------------------------------------

  onFrame(f) {
    switch (f.type) {
      case 'hello':
        this.onHello(f);
        this.presence.onHello(f.online);
        break;
      case 'typing':
        if (f.user !== this.me.id) this.presence.onTyping(f);
        break;
      case 'presence':
        this.presence.onPresence(f);
        break;
      case 'msg':
        if (f.message) this.ingest(f.message.conv, [f.message], true);
        break;
      case 'batch':
        this.ingest(f.conv, f.messages ?? [], true);
        break;
      case 'sent':
        // A reply that outlived its request's timeout: still worth keeping.
        if (f.message) this.ingest(f.message.conv, [f.message], true);
        break;
      case 'messages':
        if (f.conv) this.ingest(f.conv, f.messages ?? [], false, f.max_seq);
        break;
      case 'read':
        this.onRead(f.conv, f.seq);
        break;
      case 'receipt':
        this.onReceipt(f);
        break;
      case 'storm':
        this.onStorm(f);
        break;
      case 'conversation':
        if (f.conversation) {
          this.applyConv(f.conversation);
          this.emit('convs');
          if (this.members.has(f.conversation.id)) this.loadMembers(f.conversation.id);
        }
        break;
      case 'resync':
        this.pull(f.conv);
        break;
      case 'error':
        console.warn('server error frame:', f);
        if (f.message) this.emit('notice', f.message);
        break;
      default:
        break;
    }
  }

  onHello(f) {
    if (f.user) {
      this.me = f.user;
      this.users.put(f.user);
    }
    // Catch up after (re)connecting: the list brings every conversation
    // whose entry changed, and applyConv queues a pull for each one with
    // messages past what we hold. The open conversation is pulled anyway.
    this.syncConvs();
    if (this.openConv) {
      this.pull(this.openConv);
      // Receipts sent while we were not connected are lost to us; the
      // member list has every read marker up to now, frames do the rest.
      this.loadMembers(this.openConv).catch(() => {});
    }
    // A storm's end may have been missed while away; a storm still going
    // announces itself again at its next change.
    this.storms.clear();
    this.emit('storm', null);
    this.flushReads();
    this.flushAcks();
    this.outbox.retryNetworkFailures();
  }

  onRead(convId, seq) {
    const conv = this.convs.get(convId);
    if (!conv) return;
    if (seq > conv.read_seq) this.applyRead(conv, seq);
    this.scheduleConvSync(CONV_SYNC_DELAY_MS);
  }

  onReceipt(f) {
    const map = this.members.get(f.conv);
    if (!map) {
      // No member list yet (or its load failed): read it, it has the marker.
      if (f.conv === this.openConv) this.loadMembers(f.conv);
      return;
    }
    const reads = Array.isArray(f.reads) && f.reads.length ? f.reads : [{ user: f.user, seq: f.seq }];
    for (const r of reads) {
      const m = map.get(r.user);
      if (!m) continue;
      m.read_seq = Math.max(m.read_seq ?? 0, r.seq);
      m.last_ack_seq = Math.max(m.last_ack_seq ?? 0, r.seq);
    }
    this.emit('members', f.conv);
  }

  onStorm(f) {
    if (f.active) this.storms.set(f.conv, { count: f.count, windowMs: f.window_ms, since: Date.now() });
    else this.storms.delete(f.conv);
    this.emit('storm', f.conv);
  }

  // --- conversation list ----------------------------------------------------

  scheduleConvSync(delay) {
    if (this.convSyncTimer) return;
    this.convSyncTimer = setTimeout(() => {
      this.convSyncTimer = null;
      this.syncConvs();
    }, delay);
  }

  // syncConvs pulls every entry changed since the last version we saw.
  async syncConvs() {
    if (this.convSyncing) {
      this.convSyncAgain = true;
      return;
    }
    this.convSyncing = true;
    try {
      do {
        this.convSyncAgain = false;
        for (;;) {
          const r = await this.api.conversations(this.version, CONV_PAGE);
          const list = r.conversations ?? [];
          for (const c of list) this.applyConv(c);
          if (list.length) this.version = Math.max(this.version, list[list.length - 1].version);
          if (list.length) this.emit('convs');
          if (r.completed || !list.length) break;
        }
      } while (this.convSyncAgain);
      this.synced = true;
      this.emit('convs');
    } catch (err) {
      if (!err.network) console.warn('conversation sync:', err);
    } finally {
      this.convSyncing = false;
    }
  }

  applyConv(c) {
    const old = this.convs.get(c.id);
    if (old && (old.version ?? 0) > (c.version ?? 0)) return;
    // The entry's last_message is folded as of the entry's max_seq.
    if (c.last_message && c.max_seq > c.last_message.seq) c.last_message.asOf = c.max_seq;
    const conv = { ...c, unread: c.unread ?? 0, mentions: c.mentions ?? 0, read_seq: c.read_seq ?? 0, max_seq: c.max_seq ?? 0 };
    if (old) {
      // Our read marker may not have reached the server yet: keep it, and
      // send it again in case it was lost with a connection.
      if (old.read_seq > conv.read_seq && !conv.left) {
        conv.read_seq = old.read_seq;
        conv.unread = Math.min(conv.unread, old.unread);
        conv.mentions = Math.min(conv.mentions, old.mentions ?? 0);
        if (!this.readsPending.has(c.id)) this.queueRead(c.id, old.read_seq);
      }
      if (old.max_seq > conv.max_seq && !conv.left) {
        conv.max_seq = old.max_seq;
        if (old.last_message && (!conv.last_message || old.last_message.seq > conv.last_message.seq)) {
          conv.last_message = old.last_message;
        }
      }
    }
    this.convs.set(c.id, conv);
    // The server adds `peer` (direct) and `role` to the entry; use them
    // when present, and fall back to the member list otherwise.
    if (conv.peer) this.users.put(conv.peer);
    if (conv.last_message?.from) this.users.get(conv.last_message.from);
    if (conv.kind === 'direct' && !conv.peer && !conv.left && !this.members.has(c.id)) this.loadMembers(c.id);
    const tl = this.timelines.get(c.id);
    const have = tl ? tl.hi : Math.max(conv.last_ack_seq ?? 0, (conv.min_seq ?? 1) - 1);
    if (conv.max_seq > have) this.queuePull(c.id);
  }

  // sortedConvs orders the list by newest activity. An entry without a
  // message (a new conversation) carries no time of its own, but its
  // version orders it among the changes of all entries: it came after the
  // messages of the entries whose versions are lower, so it goes above
  // them, as a new conversation does in other chat apps.
  sortedConvs() {
    const all = [...this.convs.values()];
    const byVersion = [...all].sort((a, b) => (a.version ?? 0) - (b.version ?? 0));
    const when = new Map();
    let before = 0;
    for (const c of byVersion) {
      const ts = activity(c);
      before = Math.max(before, ts);
      when.set(c, ts || before);
    }
    return all.sort((a, b) => when.get(b) - when.get(a) || (b.version ?? 0) - (a.version ?? 0));
  }

  totalUnread() {
    let n = 0;
    for (const c of this.convs.values()) if (!c.left) n += c.unread || 0;
    return n;
  }

  // title is the name a person sees for a conversation.
  title(conv) {
    if (!conv) return '';
    if (conv.kind === 'direct') {
      if (conv.peer) return conv.peer.display_name || conv.peer.username;
      const peer = this.peerId(conv.id);
      if (peer) return this.users.name(peer);
      return conv.name || 'Direct message';
    }
    return conv.name || 'Unnamed group';
  }

  peerId(convId) {
    const peer = this.convs.get(convId)?.peer;
    if (peer) return peer.id;
    const map = this.members.get(convId);
    if (!map) return null;
    for (const id of map.keys()) if (id !== this.me.id) return id;
    return null;
  }

  // --- messages -----------------------------------------------------------------

  timeline(convId) {
    let tl = this.timelines.get(convId);
    if (!tl) {
      const conv = this.convs.get(convId);
      const hi = conv ? Math.max(conv.last_ack_seq ?? 0, (conv.min_seq ?? 1) - 1) : 0;
      tl = new Timeline(convId, hi);
      this.timelines.set(convId, tl);
    }
    return tl;
  }

  // ingest takes messages from any source. Live ones also tell us about gaps:
  // a seq past hi+1 means something may be missing, and a pull fills it.
  // asOf (pulls and pages: the answer's max_seq) is how far the folded
  // state of the text messages in msgs reaches.
  ingest(convId, msgs, live, asOf) {
    if (!convId || !msgs?.length) return;
    const tl = this.timeline(convId);
    const conv = this.convs.get(convId);
    const myId = this.me.id;
    const sorted = msgs.length > 1 ? [...msgs].sort((a, b) => a.seq - b.seq) : msgs;
    let gap = false;
    for (const m of sorted) {
      const known = conv ? conv.max_seq : 0;
      if (!live && asOf > m.seq && isText(m)) m.asOf = asOf;
      const isNew = tl.add(m);
      if (m.from === myId) this.outbox.resolve(convId, m.client_msg_id);
      if (live) {
        if (m.seq === tl.hi + 1) tl.hi = m.seq;
        else if (m.seq > tl.hi + 1) gap = true;
      }
      if (!isNew) continue;
      if (isMutation(m)) {
        if (conv && m.seq > conv.max_seq) conv.max_seq = m.seq;
        this.applyMutation(convId, m, live);
        continue;
      }
      if (live) this.presence.stopTyping(convId, m.from);
      if (conv) {
        if (m.seq > conv.max_seq) conv.max_seq = m.seq;
        if (!isText(m)) {
          // An unknown kind from a newer server: kept, neither shown nor counted.
        } else if ((live || m.seq > known) && !m.deleted && (!conv.last_message || m.seq >= conv.last_message.seq)) {
          // The entry's last_message is the server's word up to its
          // max_seq (the newest message not deleted): a pull or a page
          // (catching up after a reconnect) brings history it already
          // covers, and must not put back a message deleted meanwhile.
          conv.last_message = m;
        }
        if (m.from === myId) {
          // Not unread, and no read marker moves (a send reads nothing: the
          // view marks what the person sees, its own message included).
          if (live && convId === this.openConv) this.refreshMembersSoon(convId);
        } else if (live && isText(m) && m.seq > known && m.seq > conv.read_seq) {
          conv.unread = (conv.unread || 0) + 1;
          if (this.mentionsMe(m)) conv.mentions = (conv.mentions || 0) + 1;
        }
      }
      this.users.get(m.from);
      this.emit('message', convId, m, live);
    }
    if (live) {
      tl.advance();
      if (gap) this.pull(convId);
      this.ack(convId, tl.hi);
    }
    if (tl.size > (convId === this.openConv ? KEEP_OPEN : KEEP_BACKGROUND) && convId !== this.openConv) {
      tl.trim(KEEP_BACKGROUND);
    }
    if (!conv) this.scheduleConvSync(CONV_SYNC_DELAY_MS);
    else if (live) this.scheduleConvSync(CONV_SYNC_LAZY_MS);
    this.emit('timeline', convId);
    this.emit('convs');
  }

  // applyMutation folds an edit, delete or reaction into its target: the
  // timeline's copy, the list's last_message and a cached quote. A target
  // we do not hold is ignored: when it is loaded, it comes folded.
  applyMutation(convId, m, live) {
    const tl = this.timelines.get(convId);
    let changed = false;
    const next = fold(tl?.msgs.get(m.target), m);
    if (next) {
      tl.replace(next);
      changed = true;
    }
    const conv = this.convs.get(convId);
    if (conv?.last_message?.seq === m.target) {
      const last = next ?? fold(conv.last_message, m);
      if (last) conv.last_message = last;
    }
    const key = `${convId}:${m.target}`;
    const quoted = fold(this.quotes.get(key), m);
    if (quoted) {
      this.quotes.set(key, quoted);
      changed = true;
    }
    if (changed) this.emit('mutation', convId, m, live);
  }

  mentionsMe(m) {
    return Array.isArray(m.mentions) && m.mentions.includes(this.me.id);
  }

  // message finds a message by seq: the timeline, or a fetched quote.
  message(convId, seq) {
    return this.timelines.get(convId)?.msgs.get(seq) ?? this.quotes.get(`${convId}:${seq}`) ?? null;
  }

  // fetchQuote loads one message that a reply quotes but the timeline does
  // not hold (it is further back). before_seq=seq+1 with limit 1 is exactly
  // that message when it is visible.
  fetchQuote(convId, seq) {
    const key = `${convId}:${seq}`;
    if (this.quotes.has(key) || this.quoteLoading?.has(key)) return;
    this.quoteLoading ??= new Set();
    this.quoteLoading.add(key);
    this.api
      .messagesBefore(convId, seq + 1, 1)
      .then((r) => {
        const m = (r.messages ?? []).find((x) => x.seq === seq);
        if (m && r.max_seq > m.seq) m.asOf = r.max_seq;
        // Not visible (before my join, cleared): remember that, as a stub.
        this.quotes.set(key, m ?? { conv: convId, seq, missing: true, body: '' });
        this.emit('mutation', convId, { target: seq }, false);
      })
      .catch(() => {})
      .finally(() => this.quoteLoading.delete(key));
  }

  // mutate sends an edit, delete or reaction (fields: kind, target, body,
  // emoji, on) and folds the stored answer in at once. A network failure on
  // the socket is retried once over HTTP with the same client_msg_id.
  async mutate(convId, fields) {
    const cmid = newClientMsgId();
    let res = null;
    if (this.socket.online) {
      try {
        res = await this.socket.request({ type: 'send', conv: convId, client_msg_id: cmid, body: '', ...fields });
      } catch (err) {
        if (!err.network) throw err;
      }
    }
    if (!res) res = await this.api.send(convId, cmid, fields.body ?? '', fields);
    if (res?.message) this.ingest(convId, [res.message], true);
    return res?.message;
  }

  // typing tells the others that I am composing, at most once per 3 s.
  typing(convId) {
    const now = Date.now();
    if (now - (this.typingSent.get(convId) ?? 0) < TYPING_EVERY_MS) return;
    if (this.socket.send({ type: 'typing', conv: convId })) this.typingSent.set(convId, now);
  }

  search(q, opts) {
    return this.api.search(q, opts);
  }

  queuePull(convId) {
    this.pullQueue.add(convId);
    this.drainPulls();
  }

  drainPulls() {
    while (this.pullsRunning < PULLS_AT_ONCE && this.pullQueue.size) {
      const id = this.pullQueue.values().next().value;
      this.pullQueue.delete(id);
      this.pullsRunning++;
      this.pull(id).finally(() => {
        this.pullsRunning--;
        this.drainPulls();
      });
    }
  }

  // pull fetches everything after hi, page by page, until the server says
  // `completed`; only then is a missing seq a hole (guarantee 5).
  async pull(convId) {
    const tl = this.timeline(convId);
    if (tl.pulling) {
      tl.pullAgain = true;
      return;
    }
    tl.pulling = true;
    try {
      for (;;) {
        tl.pullAgain = false;
        const r = await this.fetchAfter(convId, tl.hi);
        const msgs = r.messages ?? [];
        this.ingest(convId, msgs, false, r.max_seq);
        if (msgs.length) tl.hi = Math.max(tl.hi, msgs[msgs.length - 1].seq);
        tl.advance();
        if (r.completed || !msgs.length) {
          // Live messages that came while this page was on its way set
          // pullAgain; anything else we hold above hi was in the answer.
          if (tl.pullAgain) continue;
          tl.hi = Math.max(tl.hi, tl.maxSeq());
          break;
        }
      }
      this.ack(convId, tl.hi);
    } catch (err) {
      // Offline or the server is away: the next hello pulls again.
      if (!err.network) console.warn('pull', convId, err);
    } finally {
      tl.pulling = false;
    }
    this.emit('timeline', convId);
  }

  async fetchAfter(convId, afterSeq) {
    if (this.socket.online) {
      try {
        return await this.socket.request({ type: 'sync', conv: convId, after_seq: afterSeq, limit: PULL_PAGE });
      } catch (err) {
        if (!err.network) throw err;
      }
    }
    return this.api.messagesAfter(convId, afterSeq, PULL_PAGE);
  }

  // open prepares a conversation for display: newer messages by pull, one
  // page of older ones, and the member list for receipts.
  async open(convId) {
    this.openConv = convId;
    const tl = this.timeline(convId);
    const work = [this.pull(convId)];
    if (!tl.olderDone && tl.size < OLDER_PAGE) work.push(this.loadOlder(convId, OLDER_PAGE));
    this.loadMembers(convId).catch(() => {});
    await Promise.allSettled(work);
  }

  close(convId) {
    if (this.openConv === convId) this.openConv = null;
    const tl = this.timelines.get(convId);
    if (tl && tl.trim(KEEP_BACKGROUND)) this.emit('timeline', convId);
  }

  async loadOlder(convId, limit = OLDER_PAGE) {
    const tl = this.timeline(convId);
    if (tl.olderDone) return;
    if (tl.loadingOlder) return tl.loadingOlder;
    tl.loadingOlder = (async () => {
      try {
        const r = await this.api.messagesBefore(convId, tl.lo, Math.min(1000, limit));
        const msgs = r.messages ?? [];
        this.ingest(convId, msgs, false, r.max_seq);
        tl.markOlder(msgs, r.completed || !msgs.length);
      } finally {
        tl.loadingOlder = null;
      }
      this.emit('timeline', convId);
    })();
    return tl.loadingOlder;
  }

  // ensureLoaded pages back until seq is in the timeline (or nothing is left).
  async ensureLoaded(convId, seq) {
    const tl = this.timeline(convId);
    while (!tl.olderDone && tl.lo > seq) {
      await this.loadOlder(convId, Math.min(1000, Math.max(OLDER_PAGE, tl.lo - seq + 10)));
    }
  }

  // --- read markers and acks ------------------------------------------------

  // markRead is called by the view with the newest message the person can
  // actually see. It updates the count at once and tells the server in a
  // batch.
  markRead(convId, seq) {
    const conv = this.convs.get(convId);
    if (!conv || conv.left || !(seq > conv.read_seq)) return;
    this.applyRead(conv, seq);
    this.queueRead(convId, seq);
  }

  applyRead(conv, seq) {
    const tl = this.timelines.get(conv.id);
    let seen = 0;
    let seenMentions = 0;
    if (tl) {
      for (const m of tl.list()) {
        if (m.seq > conv.read_seq && m.seq <= seq && m.from !== this.me.id && isText(m)) {
          seen++;
          if (this.mentionsMe(m)) seenMentions++;
        }
      }
    }
    conv.unread = seq >= conv.max_seq ? 0 : Math.max(0, (conv.unread || 0) - seen);
    conv.mentions = seq >= conv.max_seq ? 0 : Math.max(0, (conv.mentions || 0) - seenMentions);
    conv.read_seq = seq;
    this.emit('convs');
  }

  queueRead(convId, seq) {
    this.readsPending.set(convId, Math.max(seq, this.readsPending.get(convId) ?? 0));
    if (!this.readTimer) this.readTimer = setTimeout(() => this.flushReads(), READ_DELAY_MS);
  }

  flushReads() {
    clearTimeout(this.readTimer);
    this.readTimer = null;
    for (const [id, seq] of this.readsPending) {
      if (this.socket.send({ type: 'read', conv: id, seq })) {
        this.readsPending.delete(id);
        continue;
      }
      this.api
        .read(id, seq)
        .then(() => {
          if (this.readsPending.get(id) === seq) this.readsPending.delete(id);
        })
        .catch(() => {});
    }
  }

  // ack records that messages up to seq reached this tab; acks are cumulative
  // and go out every ACK_EVERY messages or ACK_DELAY_MS, not one by one.
  ack(convId, seq) {
    const conv = this.convs.get(convId);
    if (conv?.left) return;
    const sent = Math.max(this.acksSent.get(convId) ?? 0, conv?.last_ack_seq ?? 0);
    if (!(seq > sent) || seq <= (this.acksPending.get(convId) ?? 0)) return;
    this.acksPending.set(convId, seq);
    this.ackCount++;
    if (this.ackCount >= ACK_EVERY) this.flushAcks();
    else if (!this.ackTimer) this.ackTimer = setTimeout(() => this.flushAcks(), ACK_DELAY_MS);
  }

  flushAcks() {
    clearTimeout(this.ackTimer);
    this.ackTimer = null;
    this.ackCount = 0;
    for (const [id, seq] of this.acksPending) {
      if (this.socket.send({ type: 'ack', conv: id, seq })) {
        this.acksSent.set(id, seq);
        this.acksPending.delete(id);
        continue;
      }
      this.api
        .ack(id, seq)
        .then(() => {
          this.acksSent.set(id, Math.max(seq, this.acksSent.get(id) ?? 0));
          if (this.acksPending.get(id) === seq) this.acksPending.delete(id);
        })
        .catch(() => {});
    }
  }

  // --- members and receipts ---------------------------------------------------

  // loadMembers reads the member list. A call while one is on its way asks
  // for another read after it: the first answer may predate what the caller
  // wants to see.
  loadMembers(convId) {
    if (this.membersLoading.has(convId)) {
      this.membersAgain.add(convId);
      return this.membersLoading.get(convId);
    }
    const p = (async () => {
      try {
        const res = await this.api.members(convId);
        const old = this.members.get(convId);
        const map = new Map();
        for (const m of res.members ?? []) {
          // Markers only grow: a receipt that came while this answer was on
          // its way must not be undone by it.
          const prev = old?.get(m.user_id);
          if (prev) {
            m.read_seq = Math.max(m.read_seq ?? 0, prev.read_seq ?? 0);
            m.last_ack_seq = Math.max(m.last_ack_seq ?? 0, prev.last_ack_seq ?? 0);
          }
          map.set(m.user_id, m);
          if (m.username) this.users.put({ id: m.user_id, username: m.username, display_name: m.display_name || m.username });
          else this.users.get(m.user_id);
        }
        this.members.set(convId, map);
        this.emit('members', convId);
        this.emit('convs');
      } catch (err) {
        // Receipts need the list: try again while the conversation is open.
        if (convId === this.openConv && !this.convs.get(convId)?.left) {
          setTimeout(() => convId === this.openConv && this.loadMembers(convId), 3000);
        }
        throw err;
      } finally {
        this.membersLoading.delete(convId);
        if (this.membersAgain.delete(convId)) this.loadMembers(convId);
      }
    })();
    this.membersLoading.set(convId, p);
    p.catch(() => {});
    return p;
  }

  // refreshMembersSoon re-reads the member list a little after we sent
  // something: acks (delivered) have no live frame, receipts only cover reads.
  refreshMembersSoon(convId) {
    this.memberTimers ??= new Map();
    if (this.memberTimers.has(convId)) return;
    this.memberTimers.set(
      convId,
      setTimeout(() => {
        this.memberTimers.delete(convId);
        if (convId === this.openConv) this.loadMembers(convId).catch(() => {});
      }, 2500),
    );
  }

  // receipt says how far the others got with my message seq: 'read' (direct:
  // the peer read it), a count of readers (group), or 'delivered'/'sent'.
  receipt(convId, seq) {
    const conv = this.convs.get(convId);
    const map = this.members.get(convId);
    if (!map) return { state: 'sent', readers: 0 };
    let readers = 0;
    let delivered = 0;
    let others = 0;
    for (const m of map.values()) {
      if (m.user_id === this.me.id) continue;
      others++;
      if ((m.read_seq ?? 0) >= seq) readers++;
      if ((m.last_ack_seq ?? 0) >= seq || (m.read_seq ?? 0) >= seq) delivered++;
    }
    if (conv?.kind === 'direct') {
      if (readers > 0) return { state: 'read', readers };
      return { state: delivered > 0 ? 'delivered' : 'sent', readers };
    }
    if (readers > 0) return { state: readers >= others ? 'read' : 'partial', readers };
    return { state: delivered > 0 ? 'delivered' : 'sent', readers };
  }

  myRole(convId) {
    return this.members.get(convId)?.get(this.me.id)?.role ?? this.convs.get(convId)?.role ?? null;
  }

  // --- actions ----------------------------------------------------------------------

  async createDirect(userId) {
    const r = await this.api.createDirect(userId);
    this.applyConv(r.conversation);
    this.emit('convs');
    return r.conversation.id;
  }

  async createGroup(name, memberIds) {
    const r = await this.api.createGroup(name, memberIds);
    this.applyConv(r.conversation);
    this.emit('convs');
    return r.conversation.id;
  }

  async addMembers(convId, userIds) {
    await this.api.addMembers(convId, userIds);
    await this.loadMembers(convId);
    this.syncConvs();
  }

  // manage runs a change to convId's members and reads the list again.
  // A refusal reads it too: a role changed since the list was read (only
  // the members whose role changed are told), so show it as it stands.
  async manage(convId, change) {
    try {
      await change();
    } finally {
      await this.loadMembers(convId).catch(() => {});
    }
  }

  async kick(convId, userId) {
    await this.manage(convId, () => this.api.kick(convId, userId));
    this.syncConvs();
  }

  async setRole(convId, userId, role) {
    await this.manage(convId, () => this.api.setRole(convId, userId, role));
    // A hand-over changes my own role, which my entry carries.
    await this.refreshConv(convId);
  }

  // rename names a group; the other members' sessions hear of it by a
  // conversation frame.
  async rename(convId, name) {
    const r = await this.api.rename(convId, name);
    this.applyConv(r.conversation);
    this.emit('convs');
  }

  async leave(convId) {
    await this.api.leave(convId);
    await this.refreshConv(convId);
  }

  async clear(convId) {
    await this.api.clear(convId);
    const conv = await this.refreshConv(convId);
    if (conv) {
      this.timeline(convId).clear((conv.min_seq ?? 1) - 1);
      this.emit('timeline', convId);
    }
  }

  async refreshConv(convId) {
    const r = await this.api.conversation(convId);
    if (r?.conversation) {
      this.applyConv(r.conversation);
      this.emit('convs');
    }
    this.syncConvs();
    return this.convs.get(convId);
  }
}

function activity(conv) {
  return conv.last_message?.ts ?? 0;
}
