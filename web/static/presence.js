// Presence and typing (PROTOCOL.md v1.1, "Typing and presence"): who of my
// contacts is online, and who is typing where. Both are ephemeral: the
// online set is replaced by every hello (a reconnect may have missed
// changes), and a typist is shown for TYPING_SHOW_MS after its last frame.
//
// Events: 'presence' (userId), 'typing' (convId).

import { Emitter } from './util.js';

export const TYPING_SHOW_MS = 5000;
// The server drops more than one typing frame per 3 s per user and conv;
// a little more than that here, so network jitter does not get one dropped.
export const TYPING_EVERY_MS = 3200;

export class Presence extends Emitter {
  constructor() {
    super();
    this.online = new Set();
    // convId -> Map(userId -> timer)
    this.typists = new Map();
  }

  isOnline(userId) {
    return this.online.has(userId);
  }

  onHello(ids) {
    const before = this.online;
    this.online = new Set(Array.isArray(ids) ? ids : []);
    for (const id of new Set([...before, ...this.online])) {
      if (before.has(id) !== this.online.has(id)) this.emit('presence', id);
    }
  }

  // offline forgets everyone while we are not connected: we would not hear
  // that they left.
  offline() {
    this.onHello([]);
    for (const convId of [...this.typists.keys()]) {
      for (const t of this.typists.get(convId).values()) clearTimeout(t);
      this.typists.delete(convId);
      this.emit('typing', convId);
    }
  }

  onPresence(f) {
    if (!f.user) return;
    const was = this.online.has(f.user);
    if (f.online) this.online.add(f.user);
    else this.online.delete(f.user);
    if (!f.online) for (const convId of this.typists.keys()) this.stopTyping(convId, f.user);
    if (was !== Boolean(f.online)) this.emit('presence', f.user);
  }

  onTyping(f) {
    if (!f.conv || !f.user) return;
    let map = this.typists.get(f.conv);
    if (!map) {
      map = new Map();
      this.typists.set(f.conv, map);
    }
    clearTimeout(map.get(f.user));
    map.set(
      f.user,
      setTimeout(() => this.stopTyping(f.conv, f.user), TYPING_SHOW_MS),
    );
    this.emit('typing', f.conv);
  }

  // stopTyping ends a typist early: its message arrived, or it went away.
  stopTyping(convId, userId) {
    const map = this.typists.get(convId);
    if (!map?.has(userId)) return;
    clearTimeout(map.get(userId));
    map.delete(userId);
    if (!map.size) this.typists.delete(convId);
    this.emit('typing', convId);
  }

  typing(convId) {
    return [...(this.typists.get(convId)?.keys() ?? [])];
  }
}

// typingText is the line under the messages: "Alice is typing…",
// "Alice and Bob are typing…", "Alice, Bob and 2 others are typing…".
export function typingText(names) {
  if (!names.length) return '';
  if (names.length === 1) return `${names[0]} is typing…`;
  if (names.length === 2) return `${names[0]} and ${names[1]} are typing…`;
  if (names.length === 3) return `${names[0]}, ${names[1]} and ${names[2]} are typing…`;
  return `${names[0]}, ${names[1]} and ${names.length - 2} others are typing…`;
}
