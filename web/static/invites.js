// Invites: the dialog where people make, copy and revoke invite links, and
// the join page at an invite's URL (/join/CODE) where a newcomer creates an
// account with it.

import { h } from './dom.js';

function dialog(id, title, ...content) {
  const closeBtn = h('button', { type: 'button', class: 'btn icon close', 'aria-label': 'Close' }, '×');
  const dlg = h('dialog', { class: 'dialog wide', id, 'aria-labelledby': `${id}-title` }, h('header', { class: 'dialog-header' }, h('h2', { id: `${id}-title` }, title), closeBtn), ...content);
  closeBtn.addEventListener('click', () => dlg.close());
  dlg.addEventListener('close', () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  return dlg;
}

export function fmtTime(ms) {
  return ms ? new Date(ms).toLocaleString() : '';
}

export function usesText(inv) {
  return inv.uses_left === null || inv.uses_left === undefined ? `${inv.uses} used, no limit` : `${inv.uses} used, ${inv.uses_left} left`;
}

// inviteRows renders invites with a Revoke button each.
export function inviteRows(api, list, onChange) {
  if (!list.length) return [h('p', { class: 'hint', id: 'no-invites' }, 'No invites yet.')];
  return list.map((inv) =>
    h(
      'div',
      { class: 'invite-row', dataset: { id: inv.id } },
      h('span', { class: 'invite-id' }, inv.id),
      h('span', { class: 'hint' }, `${usesText(inv)} · expires ${fmtTime(inv.expires_at)}`),
      h(
        'button',
        {
          type: 'button',
          class: 'btn small danger invite-revoke',
          onClick: async () => {
            await api.call('DELETE', `/invites/${encodeURIComponent(inv.id)}`);
            onChange();
          },
        },
        'Revoke',
      ),
    ),
  );
}

// invitesDialog lets the user make an invite link (shown once: only a hash
// is kept on the server), and lists and revokes the ones they made.
export function invitesDialog(api) {
  const err = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const list = h('div', { class: 'invite-list', id: 'invite-list' });
  const uses = h('select', { class: 'input', id: 'invite-uses' }, h('option', { value: '1' }, '1 person'), h('option', { value: '5' }, '5 people'), h('option', { value: '25' }, '25 people'), h('option', { value: '0' }, 'No limit'));
  const expiry = h('select', { class: 'input', id: 'invite-expiry' }, h('option', { value: String(86400000) }, '1 day'), h('option', { value: String(7 * 86400000), selected: true }, '7 days'), h('option', { value: String(30 * 86400000) }, '30 days'));
  const link = h('input', { class: 'input', id: 'invite-link', readonly: true, 'aria-label': 'Invite link' });
  const copy = h('button', { type: 'button', class: 'btn', id: 'invite-copy' }, 'Copy');
  const made = h('div', { class: 'invite-made', hidden: true }, h('p', { class: 'hint' }, 'Send this link to the people you invite. It is shown only now.'), h('div', { class: 'row' }, link, copy));
  copy.addEventListener('click', async () => {
    link.select();
    try {
      await navigator.clipboard.writeText(link.value);
      copy.textContent = 'Copied';
    } catch {
      document.execCommand?.('copy');
    }
  });
  const refresh = async () => {
    try {
      const res = await api.call('GET', '/invites');
      list.replaceChildren(...inviteRows(api, res.invites, refresh));
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
    }
  };
  const form = h(
    'form',
    { class: 'dialog-form', id: 'invite-form' },
    h('div', { class: 'row' }, h('label', { for: 'invite-uses' }, 'For '), uses, h('label', { for: 'invite-expiry' }, ' valid '), expiry),
    h('div', { class: 'dialog-actions' }, h('button', { type: 'submit', class: 'btn primary', id: 'invite-create' }, 'Create invite link')),
    made,
    err,
    h('h3', null, 'Your invites'),
    list,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.hidden = true;
    try {
      const { invite } = await api.call('POST', '/invites', { max_uses: Number(uses.value), expires_in_ms: Number(expiry.value) });
      link.value = invite.url;
      copy.textContent = 'Copy';
      made.hidden = false;
      refresh();
    } catch (e2) {
      err.textContent = e2.code === 'forbidden' ? 'You cannot invite people on this server.' : e2.message;
      err.hidden = false;
    }
  });
  dialog('invites-dialog', 'Invite people', form);
  refresh();
}

// inviteCode is the code of a join URL (/join/CODE), or null.
export function inviteCode() {
  const m = location.pathname.match(/^\/join\/([A-Za-z0-9_-]+)$/);
  return m ? m[1] : null;
}

// joinView is the join page: create an account with the invite.
export function joinView({ api, code, onSession }) {
  const username = h('input', { class: 'input', id: 'username', name: 'username', autocomplete: 'username', required: true, autocapitalize: 'none', spellcheck: 'false' });
  const password = h('input', { class: 'input', id: 'password', name: 'password', type: 'password', autocomplete: 'new-password', required: true, minlength: '8' });
  const display = h('input', { class: 'input', id: 'display-name', name: 'display_name', autocomplete: 'name' });
  const error = h('p', { class: 'form-error', id: 'join-error', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn primary wide', id: 'join-submit' }, 'Join');
  const form = h(
    'form',
    { class: 'auth-form', id: 'join-form', 'aria-labelledby': 'join-title' },
    h('h1', { id: 'join-title' }, 'Join imserver'),
    h('p', { class: 'hint' }, 'You were invited. Choose a username and a password.'),
    h('div', { class: 'field' }, h('label', { for: 'username' }, 'Username'), username),
    h('div', { class: 'field' }, h('label', { for: 'password' }, 'Password'), password),
    h('div', { class: 'field' }, h('label', { for: 'display-name' }, 'Display name ', h('span', { class: 'hint' }, '(optional)')), display),
    error,
    submit,
    h('p', { class: 'hint' }, h('a', { href: '/', id: 'join-login' }, 'I already have an account')),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const body = { username: username.value.trim(), password: password.value, invite: code };
      if (display.value.trim()) body.display_name = display.value.trim();
      const res = await api.call('POST', '/auth/register', body);
      history.replaceState(null, '', '/');
      onSession(res.user, res.token);
    } catch (err) {
      error.textContent =
        err.code === 'forbidden'
          ? 'This invite is invalid, expired or used up. Ask for a new one.'
          : err.code === 'conflict'
            ? 'That username is taken.'
            : err.code === 'rate_limited'
              ? 'Too many attempts. Try again later.'
              : err.message || 'Something went wrong.';
      error.hidden = false;
      submit.disabled = false;
    }
  });
  queueMicrotask(() => username.focus());
  return h('main', { class: 'auth' }, form);
}
