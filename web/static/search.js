// Message search (PROTOCOL.md v1.1, GET /api/v1/search): a box in the
// sidebar, results in place of the conversation list, each with the
// conversation, sender, time and a snippet; a click opens the conversation
// at the message.

import { h } from './dom.js';
import { debounce } from './util.js';
import { formatFull, listTime } from './format.js';

const LIMIT = 30;
// While older messages are still being indexed (after an upgrade), the
// open results are searched again this often, so that they and the
// progress grow as the index does.
const INDEXING_REFRESH_MS = 5000;

export class SearchPanel {
  constructor(client, users, { onOpen, container }) {
    this.client = client;
    this.users = users;
    this.onOpen = onOpen;
    this.container = container;
    this.seq = 0;
    this.query = '';
    this.input = h('input', {
      type: 'search',
      id: 'search-input',
      class: 'input',
      placeholder: 'Search messages',
      'aria-label': 'Search messages',
      autocomplete: 'off',
      enterkeyhint: 'search',
    });
    this.statusEl = h('p', { class: 'search-status', id: 'search-status', 'aria-live': 'polite' });
    this.listEl = h('ul', { class: 'search-results', id: 'search-results', 'aria-label': 'Search results' });
    // The server's background indexing of older messages, when it says
    // some are not searchable yet (the answer's "indexing").
    this.indexingEl = h('p', { class: 'search-indexing', id: 'search-indexing', role: 'status', hidden: true });
    this.refresh = 0;
    this.panel = h(
      'div',
      { class: 'search-panel', id: 'search-panel', hidden: true },
      h(
        'div',
        { class: 'search-head' },
        this.statusEl,
        h('button', { type: 'button', class: 'link', id: 'search-close', onClick: () => this.close() }, 'Close'),
      ),
      this.indexingEl,
      this.listEl,
    );
    this.root = h('div', { class: 'search-box', role: 'search' }, this.input);
    const later = debounce(() => this.run(), 350);
    this.input.addEventListener('input', () => {
      if (this.input.value.trim().length >= 2) later();
      else if (!this.input.value.trim()) {
        later.cancel();
        this.close();
      }
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        later.cancel();
        this.run();
      } else if (e.key === 'Escape' && (this.input.value || !this.panel.hidden)) {
        e.preventDefault();
        e.stopPropagation();
        this.close();
      } else if (e.key === 'ArrowDown') {
        const first = this.listEl.querySelector('button');
        if (first) {
          e.preventDefault();
          first.focus();
        }
      }
    });
    this.listEl.addEventListener('keydown', (e) => {
      if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
      const btns = [...this.listEl.querySelectorAll('button')];
      const i = btns.indexOf(document.activeElement);
      if (i < 0) return;
      e.preventDefault();
      if (e.key === 'ArrowUp' && i === 0) this.input.focus();
      else btns[Math.max(0, Math.min(btns.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)))].focus();
    });
  }

  close() {
    this.seq++;
    this.stopRefresh();
    this.showIndexing(null);
    this.input.value = '';
    this.query = '';
    this.panel.hidden = true;
    this.container?.classList.remove('searching');
    this.listEl.replaceChildren();
  }

  async run() {
    const q = this.input.value.trim();
    if (!q) return this.close();
    const mine = ++this.seq;
    this.stopRefresh();
    this.query = q;
    this.panel.hidden = false;
    this.container?.classList.add('searching');
    this.statusEl.textContent = 'Searching…';
    let res;
    try {
      res = await this.client.search(q, { limit: LIMIT });
    } catch (err) {
      if (mine !== this.seq) return;
      this.listEl.replaceChildren();
      this.showIndexing(null);
      this.statusEl.textContent = err.code === 'bad_request' ? `Cannot search for that: ${err.message}` : `Search failed: ${err.message}`;
      return;
    }
    if (mine !== this.seq) return;
    this.listEl.replaceChildren();
    this.show(res, q);
    this.showIndexing(res?.indexing);
    if (res?.indexing) {
      this.refresh = setTimeout(() => {
        this.refresh = 0;
        // Not while the user is moving through the results.
        if (mine === this.seq && !this.listEl.contains(document.activeElement)) this.run();
      }, INDEXING_REFRESH_MS);
    }
  }

  // show adds a page of results to the list, with a button for the next
  // page while the answer says there are more (its cursor, next).
  show(res, q) {
    const results = res?.results ?? [];
    this.listEl.querySelector('#search-more')?.closest('li').remove();
    const first = this.listEl.childElementCount; // where this page begins
    this.listEl.append(...results.map((r) => this.item(r)));
    const n = this.listEl.childElementCount;
    this.statusEl.textContent = n
      ? `${n}${res.completed ? '' : '+'} ${n === 1 ? 'result' : 'results'} for “${q}”`
      : `No messages match “${q}”.`;
    if (!res?.completed && res?.next) {
      const more = h('button', { type: 'button', class: 'link search-more', id: 'search-more' }, 'More results');
      more.addEventListener('click', () => this.more(q, res.next, more));
      this.listEl.append(h('li', null, more));
    }
    return first;
  }

  async more(q, cursor, button) {
    const mine = this.seq;
    this.stopRefresh(); // a refresh would start over from the first page
    button.disabled = true;
    button.textContent = 'Loading…';
    let res;
    try {
      res = await this.client.search(q, { limit: LIMIT, cursor });
    } catch (err) {
      if (mine !== this.seq) return;
      button.disabled = false;
      button.textContent = 'More results';
      this.statusEl.textContent = `Search failed: ${err.message}`;
      return;
    }
    if (mine !== this.seq) return;
    const first = this.show(res, q);
    this.listEl.children[first]?.querySelector('button')?.focus();
  }

  stopRefresh() {
    clearTimeout(this.refresh);
    this.refresh = 0;
  }

  // showIndexing shows how far the index of older messages is ({done,
  // total}), or hides the line (null: nothing is waiting).
  showIndexing(ix) {
    if (!ix) {
      this.indexingEl.hidden = true;
      this.indexingEl.textContent = '';
      return;
    }
    const pct = ix.total > 0 ? Math.min(99, Math.floor((100 * ix.done) / ix.total)) : 0;
    this.indexingEl.textContent = `Indexing older messages… ${pct}%`;
    this.indexingEl.title = 'Older messages are still being added to the search index: results may be missing some of them.';
    this.indexingEl.hidden = false;
  }

  item(r) {
    const m = r.message ?? {};
    const convId = r.conv ?? m.conv;
    const conv = this.client.convs.get(convId);
    return h(
      'li',
      null,
      h(
        'button',
        {
          type: 'button',
          class: 'search-result',
          dataset: { conv: convId, seq: String(m.seq) },
          onClick: () => this.onOpen(convId, m.seq),
        },
        h(
          'span',
          { class: 'result-top' },
          h('span', { class: 'result-conv', dir: 'auto' }, conv ? this.client.title(conv) : 'Conversation'),
          h('time', { class: 'result-time', datetime: new Date(m.ts).toISOString(), title: formatFull(m.ts) }, listTime(m.ts)),
        ),
        h('span', { class: 'result-sender', dir: 'auto' }, m.from === this.client.me.id ? 'You' : this.users.name(m.from)),
        h('span', { class: 'result-snippet', dir: 'auto' }, ...snippetNodes(r.snippet ?? m.body ?? '', this.query)),
      ),
    );
  }
}

// snippetNodes marks the query's words in a snippet (the server sends it
// as plain text) with <mark> elements built with the DOM: a snippet is
// never parsed as HTML. Matching ignores case and accents, as the search
// does, and a word marks every word it begins (prefix* and whole words
// alike: close enough for the eye).
export function snippetNodes(snippet, query) {
  const text = String(snippet);
  const words = String(query)
    .split(/[\s"*()]+/)
    .filter((w) => w && !/^(AND|OR|NOT|NEAR)$/.test(w))
    .map(fold)
    .filter(Boolean);
  if (!words.length) return [text];
  // Fold the text character by character, keeping where each folded
  // character came from.
  const chars = [...text];
  let folded = '';
  const from = [];
  chars.forEach((ch, i) => {
    const f = fold(ch);
    folded += f;
    for (let k = 0; k < f.length; k++) from.push(i);
  });
  const marked = new Array(chars.length).fill(false);
  for (const w of words) {
    for (let at = folded.indexOf(w); at >= 0; at = folded.indexOf(w, at + 1)) {
      for (let k = at; k < at + w.length; k++) marked[from[k]] = true;
    }
  }
  const out = [];
  let run = '';
  let inMark = false;
  const flush = () => {
    if (run) out.push(inMark ? h('mark', null, run) : run);
    run = '';
  };
  chars.forEach((ch, i) => {
    if (marked[i] !== inMark) {
      flush();
      inMark = marked[i];
    }
    run += ch;
  });
  flush();
  return out;
}

function fold(s) {
  return s.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}
