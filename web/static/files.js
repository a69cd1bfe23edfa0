// Files: attachments shown in messages (images as thumbnails, other files
// as cards) and the composer's pending uploads (attach button, drag and
// drop, paste, progress, remove before sending). Uploads go to
// POST /api/v1/files; file objects carry signed links, so <img> and <a>
// load them without the token.

import { h } from './dom.js';

export const MAX_ATTACHMENTS = 10;

export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10 * 1024 ? 1 : 0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(1)} GB`;
}

// fileSummary stands for a message's files where there is no room to
// show them (the conversation list); the list's copy of a message may not
// carry its attachments, hence the plain fallback.
export function fileSummary(m) {
  const files = m.attachments ?? [];
  if (files.length === 1) return files[0].name;
  if (files.length > 1) return `${files.length} files`;
  return 'Attachment';
}

// A file's links are signed and expire one to two hours after the server
// handed them out, and a team's tab stays open all day. So a thumbnail
// that fails to load, and a link clicked after its expiry, ask for fresh
// links first (refresh: the message pulled again, its files returned)
// and then load or open the file.

// linkExpired reports whether a signed link expires within a minute.
export function linkExpired(url) {
  const exp = Number(new URL(url, location.href).searchParams.get('exp'));
  return exp > 0 && exp * 1000 < Date.now() + 60_000;
}

// freshFile returns f with fresh links through refresh, or null.
async function freshFile(f, refresh) {
  try {
    return (await refresh())?.find((x) => x.id === f.id) ?? null;
  } catch {
    return null;
  }
}

// followFresh opens or downloads a's file after refreshing its links; the
// window for a new tab is opened before the wait, while the click still
// counts as the user's.
async function followFresh(a, f, refresh) {
  const tab = a.target === '_blank' ? window.open('', '_blank') : null;
  const fresh = await freshFile(f, refresh);
  if (!fresh) {
    tab?.close();
    return;
  }
  a.href = fresh.url;
  if (tab) {
    tab.opener = null;
    tab.location.href = fresh.url;
    return;
  }
  const link = h('a', { href: fresh.url, download: f.name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
}

// attachmentsEl renders a message's files, or null when it has none.
// refresh, when given, returns the message's files with fresh links.
export function attachmentsEl(files, refresh) {
  if (!files?.length) return null;
  const onClick = (f) => (e) => {
    const a = e.currentTarget;
    if (!refresh || !linkExpired(a.href)) return;
    e.preventDefault();
    followFresh(a, f, refresh);
  };
  return h(
    'div',
    { class: 'attachments' },
    files.map((f) => {
      if (f.thumb_url) {
        let retried = false;
        const img = h('img', {
          class: 'attachment-thumb',
          src: f.thumb_url,
          alt: f.name,
          loading: 'lazy',
          decoding: 'async',
          width: f.width && f.height ? String(thumbSize(f).w) : undefined,
          height: f.width && f.height ? String(thumbSize(f).h) : undefined,
          onError: async () => {
            if (retried || !refresh) return;
            retried = true;
            const fresh = await freshFile(f, refresh);
            if (fresh?.thumb_url) {
              img.src = fresh.thumb_url;
              link.href = fresh.url;
            }
          },
        });
        const link = h(
          'a',
          {
            class: 'attachment image',
            href: f.url,
            target: '_blank',
            rel: 'noopener noreferrer',
            title: `${f.name} (${formatSize(f.size)})`,
            dataset: { file: f.id },
            onClick: onClick(f),
          },
          img,
        );
        return link;
      }
      return h(
        'a',
        { class: 'attachment file-card', href: f.url, download: f.name, rel: 'noopener noreferrer', dataset: { file: f.id }, onClick: onClick(f) },
        h('span', { class: 'file-icon', 'aria-hidden': 'true' }, '📄'),
        h('span', { class: 'file-name' }, f.name),
        h('span', { class: 'file-size' }, formatSize(f.size)),
      );
    }),
  );
}

// thumbSize is the size the server's thumbnail will have (at most 400 on
// the longer side), shown smaller by CSS: reserving it keeps the list from
// jumping while images load.
function thumbSize(f) {
  const n = 400;
  if (f.width <= n && f.height <= n) return { w: f.width, h: f.height };
  if (f.width >= f.height) return { w: n, h: Math.max(1, Math.round((f.height * n) / f.width)) };
  return { w: Math.max(1, Math.round((f.width * n) / f.height)), h: n };
}

// PendingFiles is the composer's list of attachments being uploaded or
// ready to send. onChange is called whenever it changes.
export class PendingFiles {
  constructor({ api, onChange, onError }) {
    this.api = api;
    this.onChange = onChange ?? (() => {});
    this.onError = onError ?? (() => {});
    this.items = [];
    this.picker = h('input', {
      type: 'file',
      multiple: true,
      hidden: true,
      id: 'file-input',
      onChange: () => {
        this.add([...this.picker.files]);
        this.picker.value = '';
      },
    });
    this.button = h(
      'button',
      { type: 'button', class: 'btn icon attach-btn', id: 'attach-btn', 'aria-label': 'Attach files', title: 'Attach files', onClick: () => this.picker.click() },
      '+',
    );
    this.listEl = h('div', { class: 'pending-files', id: 'pending-files', hidden: true });
  }

  // wire lets the page take files by paste (into input) and by drop (onto
  // zone). The zone outlives the composer (it is the conversation view), so
  // its listeners are added once and go to the composer of the moment.
  wire(input, zone) {
    input.addEventListener('paste', (e) => {
      const files = [...(e.clipboardData?.files ?? [])];
      if (!files.length) return;
      e.preventDefault();
      this.add(files.map((f, i) => named(f, i)));
    });
    const first = !zone.pendingFiles;
    zone.pendingFiles = this;
    if (!first) return;
    zone.addEventListener('dragover', (e) => {
      if (![...(e.dataTransfer?.types ?? [])].includes('Files')) return;
      e.preventDefault();
      zone.classList.add('dropping');
    });
    zone.addEventListener('dragleave', (e) => {
      if (e.target === zone || !zone.contains(e.relatedTarget)) zone.classList.remove('dropping');
    });
    zone.addEventListener('drop', (e) => {
      zone.classList.remove('dropping');
      const files = [...(e.dataTransfer?.files ?? [])];
      if (!files.length) return;
      e.preventDefault();
      zone.pendingFiles.add(files);
    });
  }

  add(files) {
    for (const file of files) {
      if (this.items.length >= MAX_ATTACHMENTS) {
        this.onError(`At most ${MAX_ATTACHMENTS} files per message.`);
        break;
      }
      const item = { file, name: file.name, size: file.size, progress: 0, status: 'uploading', result: null, error: '', xhr: null };
      this.items.push(item);
      this.upload(item);
    }
    this.render();
  }

  upload(item) {
    item.xhr = this.api.uploadFile(item.file, item.name, (loaded, total) => {
      item.progress = total ? loaded / total : 0;
      this.renderItem(item);
    });
    item.xhr.done
      .then((file) => {
        item.status = 'ready';
        item.result = file;
      })
      .catch((err) => {
        item.status = 'failed';
        item.error = err.code === 'too_large' ? 'too large' : err.message || 'upload failed';
      })
      .finally(() => {
        item.xhr = null;
        this.render();
      });
  }

  remove(item) {
    item.xhr?.abort();
    this.items = this.items.filter((i) => i !== item);
    this.render();
  }

  get uploading() {
    return this.items.some((i) => i.status === 'uploading');
  }

  // ready returns the uploaded files to send.
  ready() {
    return this.items.filter((i) => i.status === 'ready').map((i) => i.result);
  }

  clear() {
    for (const i of this.items) i.xhr?.abort();
    this.items = [];
    this.render();
  }

  render() {
    this.listEl.hidden = this.items.length === 0;
    this.listEl.replaceChildren(...this.items.map((i) => this.itemEl(i)));
    this.onChange();
  }

  renderItem(item) {
    const bar = item.el?.querySelector('progress');
    if (bar) bar.value = item.progress;
  }

  itemEl(item) {
    item.el = h(
      'div',
      { class: `pending-file ${item.status}`, dataset: { status: item.status } },
      h('span', { class: 'file-name' }, item.name),
      h('span', { class: 'file-size' }, item.status === 'failed' ? `Not uploaded: ${item.error}` : formatSize(item.size)),
      item.status === 'uploading' ? h('progress', { max: '1', value: String(item.progress), 'aria-label': `Uploading ${item.name}` }) : null,
      h('button', { type: 'button', class: 'link remove-file', 'aria-label': `Remove ${item.name}`, onClick: () => this.remove(item) }, '✕'),
    );
    return item.el;
  }
}

// named gives a pasted image (which browsers call "image.png") a name
// that tells it from the others.
function named(file, i) {
  if (file.name && file.name !== 'image.png') return file;
  const stamp = new Date().toISOString().replace(/[:T]/g, '-').slice(0, 19);
  const ext = (file.type.split('/')[1] || 'png').replace('jpeg', 'jpg');
  return new File([file], `pasted-${stamp}${i ? `-${i}` : ''}.${ext}`, { type: file.type });
}
