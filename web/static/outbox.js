// Outbox holds the messages this tab is sending. Each has a client_msg_id made
// once; every retry reuses it, so the server stores the message at most once
// (PROTOCOL.md, guarantee 3) however often we try.

import { newClientMsgId } from './util.js';

const SEND_TIMEOUT_MS = 15000;
const MAX_RATE_RETRIES = 5;

export class Outbox {
  // storageKey names where unsent messages are kept across reloads (per
  // user); they come back as failed and go out again, with the same
  // client_msg_id, when the connection is up.
  constructor(client, storageKey) {
    this.client = client;
    this.byConv = new Map();
    this.storageKey = storageKey;
    for (const [cmid, saved] of Object.entries(this.loadSaved())) {
      const item = { ...saved, cmid, files: saved.files ?? [], status: 'failed', error: 'not sent yet.', network: true, rateRetries: 0 };
      this.byConv.set(item.conv, [...this.list(item.conv), item]);
    }
  }

  loadSaved() {
    if (!this.storageKey) return {};
    try {
      return JSON.parse(localStorage.getItem(this.storageKey) || '{}') ?? {};
    } catch {
      return {};
    }
  }

  // save adds or removes one entry; read-modify-write keeps what other tabs
  // of the same person saved.
  save(item, keep) {
    if (!this.storageKey) return;
    const saved = this.loadSaved();
    if (keep) saved[item.cmid] = { conv: item.conv, body: item.body, ts: item.ts, extra: item.extra, files: item.files };
    else delete saved[item.cmid];
    try {
      if (Object.keys(saved).length) localStorage.setItem(this.storageKey, JSON.stringify(saved));
      else localStorage.removeItem(this.storageKey);
    } catch {
      // Storage full or disabled: the message is still in memory.
    }
  }

  list(convId) {
    return this.byConv.get(convId) ?? [];
  }

  // extra carries the v1.1 fields of a text message (reply_to,
  // attachments: ids); files are the attached file objects, to show it.
  send(convId, body, extra, files = []) {
    const item = {
      conv: convId,
      cmid: newClientMsgId(),
      body,
      extra: extra && Object.keys(extra).length ? extra : undefined,
      files,
      ts: Date.now(),
      status: 'sending',
      error: '',
      network: false,
      rateRetries: 0,
    };
    this.byConv.set(convId, [...this.list(convId), item]);
    this.save(item, true);
    this.attempt(item);
    return item;
  }

  retry(convId, cmid) {
    const item = this.list(convId).find((i) => i.cmid === cmid);
    if (item && item.status === 'failed') this.attempt(item);
  }

  discard(convId, cmid) {
    this.remove(convId, cmid);
  }

  // retryNetworkFailures resends what failed only because we were offline.
  retryNetworkFailures() {
    for (const items of this.byConv.values()) {
      for (const item of items) if (item.status === 'failed' && item.network) this.attempt(item);
    }
  }

  // resolve drops the pending copy once the stored message is known, whether
  // it came back as `sent`, over HTTP, or as a live `msg` from another path.
  resolve(convId, cmid) {
    if (!cmid) return;
    if (this.list(convId).some((i) => i.cmid === cmid)) this.remove(convId, cmid);
  }

  remove(convId, cmid) {
    this.save({ cmid }, false);
    const rest = this.list(convId).filter((i) => i.cmid !== cmid);
    if (rest.length) this.byConv.set(convId, rest);
    else this.byConv.delete(convId);
    this.client.emit('pending', convId);
  }

  isPending(item) {
    return this.list(item.conv).includes(item);
  }

  async attempt(item) {
    const { client } = this;
    item.status = 'sending';
    item.error = '';
    item.network = false;
    client.emit('pending', item.conv);
    try {
      let res;
      if (client.socket.online) {
        res = await client.socket.request(
          { ...item.extra, type: 'send', conv: item.conv, client_msg_id: item.cmid, body: item.body },
          SEND_TIMEOUT_MS,
        );
      } else {
        res = await client.api.send(item.conv, item.cmid, item.body, item.extra);
      }
      client.ingest(item.conv, [res.message], true);
      // ingest resolves by client_msg_id; a duplicate answer carries the
      // first stored copy, which has the same id.
      this.resolve(item.conv, item.cmid);
    } catch (err) {
      if (!this.isPending(item)) return;
      if (err.code === 'rate_limited' && item.rateRetries < MAX_RATE_RETRIES) {
        item.rateRetries++;
        setTimeout(() => this.isPending(item) && this.attempt(item), Math.max(250, err.retryAfterMs || 1000));
        return;
      }
      item.status = 'failed';
      item.network = Boolean(err.network);
      item.error = describe(err);
      client.emit('pending', item.conv);
    }
  }
}

function describe(err) {
  switch (err.code) {
    case 'too_large':
      return 'the message is too long.';
    case 'rate_limited':
      return 'sending too fast, try again in a moment.';
    case 'not_member':
    case 'forbidden':
      return 'you cannot post here.';
    case 'offline':
    case 'disconnected':
    case 'network':
      return 'no connection.';
    case 'timeout':
      return 'no answer from the server.';
    default:
      return err.message || 'the server refused it.';
  }
}
