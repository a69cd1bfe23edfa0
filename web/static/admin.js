// The admin page (auth.admins): users (disable, enable, reset password),
// every invite, groups in storm mode, the version and the health checks.

import { h } from './dom.js';
import { inviteRows } from './invites.js';

// isAdmin asks the server; only admins get the status.
export async function isAdmin(api) {
  try {
    await api.call('GET', '/admin/status');
    return true;
  } catch {
    return false;
  }
}

export function adminDialog(api, me) {
  const err = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const status = h('dl', { class: 'admin-status', id: 'admin-status' });
  const users = h('div', { class: 'admin-users', id: 'admin-users' });
  const invites = h('div', { class: 'invite-list', id: 'admin-invites' });
  const storms = h('div', { class: 'admin-storms', id: 'admin-storms' });
  const fail = (e) => {
    err.textContent = e.message || String(e);
    err.hidden = false;
  };

  const loadUsers = async () => {
    const res = await api.call('GET', '/admin/users');
    users.replaceChildren(
      ...res.users.map((u) => {
        const pw = h('input', { class: 'input small', type: 'password', placeholder: 'new password', 'aria-label': `New password for ${u.username}`, autocomplete: 'new-password' });
        const toggle = h(
          'button',
          {
            type: 'button',
            class: `btn small ${u.disabled ? '' : 'danger'} user-toggle`,
            disabled: u.id === me.id,
            onClick: async () => {
              try {
                await api.call('POST', `/admin/users/${encodeURIComponent(u.id)}/${u.disabled ? 'enable' : 'disable'}`);
                await loadUsers();
              } catch (e) {
                fail(e);
              }
            },
          },
          u.disabled ? 'Enable' : 'Disable',
        );
        const reset = h(
          'button',
          {
            type: 'button',
            class: 'btn small user-reset',
            onClick: async () => {
              try {
                await api.call('POST', `/admin/users/${encodeURIComponent(u.id)}/password`, { password: pw.value });
                pw.value = '';
                reset.textContent = 'Password set';
              } catch (e) {
                fail(e);
              }
            },
          },
          'Set password',
        );
        return h(
          'div',
          { class: 'admin-user', dataset: { username: u.username, disabled: String(u.disabled) } },
          h('span', { class: 'admin-user-name' }, `${u.display_name} (@${u.username})`, u.admin ? h('span', { class: 'badge' }, 'admin') : null, u.disabled ? h('span', { class: 'badge muted' }, 'disabled') : null),
          h('span', { class: 'row' }, pw, reset, toggle),
        );
      }),
    );
  };
  const loadInvites = async () => {
    const res = await api.call('GET', '/admin/invites');
    invites.replaceChildren(...inviteRows(api, res.invites, loadInvites));
  };
  const loadStatus = async () => {
    const s = await api.call('GET', '/admin/status');
    const row = (k, v) => [h('dt', null, k), h('dd', null, v)];
    status.replaceChildren(
      ...row('Version', s.version),
      ...row('Up since', new Date(s.started_at).toLocaleString()),
      ...row('Open sessions', String(s.sessions)),
      ...row('Registration', s.registration),
      ...row('Web Push', s.push ? 'on' : 'off'),
      ...Object.entries(s.checks).flatMap(([k, v]) => row(`Health: ${k}`, v)),
    );
    const st = await api.call('GET', '/admin/storms');
    storms.replaceChildren(...(st.storms.length ? st.storms.map((x) => h('p', null, `${x.name || x.conv}: ${x.count} messages in the window`)) : [h('p', { class: 'hint' }, 'No group is in storm mode.')]));
  };

  const closeBtn = h('button', { type: 'button', class: 'btn icon close', 'aria-label': 'Close' }, '×');
  const dlg = h(
    'dialog',
    { class: 'dialog wide', id: 'admin-dialog', 'aria-labelledby': 'admin-title' },
    h('header', { class: 'dialog-header' }, h('h2', { id: 'admin-title' }, 'Administration'), closeBtn),
    h('div', { class: 'dialog-form' }, err, h('h3', null, 'Server'), status, h('h3', null, 'Users'), users, h('h3', null, 'Invites'), invites, h('h3', null, 'Storms'), storms),
  );
  closeBtn.addEventListener('click', () => dlg.close());
  dlg.addEventListener('close', () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  Promise.all([loadStatus(), loadUsers(), loadInvites()]).catch(fail);
}
