// Users is the tab's directory of people: every user object the server has
// shown us (hello, login, search, conversation peers, member lists), so ids
// can be shown as names.

import { Emitter } from './util.js';

const DIRECTORY_LIMIT = 1000;
const DIRECTORY_EVERY_MS = 15000;

export class Users extends Emitter {
  constructor(api) {
    super();
    this.api = api;
    this.byId = new Map();
    this.wanted = new Set();
    this.timer = null;
    this.lastDirectory = 0;
    this.missing = new Map();
  }

  put(user) {
    if (!user?.id) return;
    const old = this.byId.get(user.id);
    if (old && old.username === user.username && old.display_name === user.display_name) return;
    this.byId.set(user.id, user);
    this.emit('change', user.id);
  }

  get(id) {
    const u = this.byId.get(id);
    if (!u && id) this.want(id);
    return u;
  }

  name(id) {
    const u = this.get(id);
    if (u) return u.display_name || u.username;
    return 'Unknown user';
  }

  want(id) {
    if (Date.now() - (this.missing.get(id) ?? 0) < 300000) return;
    this.wanted.add(id);
    if (this.timer) return;
    const wait = Math.max(50, this.lastDirectory + DIRECTORY_EVERY_MS - Date.now());
    this.timer = setTimeout(() => this.fetchWanted(), wait);
  }

  // PROTOCOL.md has no lookup by id, only a prefix search; an empty prefix
  // lists everyone (up to the page limit), which covers a team. Former
  // members of a group are the usual unknowns (current ones come with the
  // member list), so this runs rarely and at most every 15 s.
  async fetchWanted() {
    this.timer = null;
    if (!this.wanted.size) return;
    this.lastDirectory = Date.now();
    try {
      const res = await this.api.searchUsers('', DIRECTORY_LIMIT);
      for (const u of res.users ?? []) this.put(u);
    } catch {
      // Keep the ids: a later call retries.
      return;
    }
    for (const id of this.wanted) if (!this.byId.has(id)) this.missing.set(id, Date.now());
    this.wanted.clear();
  }

  async search(q) {
    const res = await this.api.searchUsers(q, 50);
    const users = res.users ?? [];
    for (const u of users) this.put(u);
    return users;
  }
}
