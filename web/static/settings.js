// Settings: where this account is logged in (end a session, or all but
// this one) and a password change.

import { h } from './dom.js';
import { confirmDialog, errorLine, modal } from './dialogs.js';

// device names a session by its user agent: browser and system, which is
// what a person recognises ("Firefox on Linux"), not the raw string.
export function device(ua) {
  if (!ua) return 'Unknown device';
  const browser =
    (/Edg\//.test(ua) && 'Edge') ||
    (/OPR\//.test(ua) && 'Opera') ||
    (/Firefox\//.test(ua) && 'Firefox') ||
    (/Chrom(e|ium)\//.test(ua) && 'Chrome') ||
    (/Safari\//.test(ua) && 'Safari') ||
    null;
  const system =
    (/Android/.test(ua) && 'Android') ||
    (/iPhone|iPad|iPod/.test(ua) && 'iOS') ||
    (/Windows/.test(ua) && 'Windows') ||
    (/Mac OS X|Macintosh/.test(ua) && 'macOS') ||
    (/CrOS/.test(ua) && 'ChromeOS') ||
    (/Linux/.test(ua) && 'Linux') ||
    null;
  if (browser && system) return `${browser} on ${system}`;
  return browser || system || ua.slice(0, 60);
}

function when(ms) {
  const d = new Date(ms);
  const ago = Date.now() - ms;
  if (ago < 2 * 60 * 1000) return 'just now';
  if (ago < 60 * 60 * 1000) return `${Math.round(ago / 60000)} min ago`;
  return d.toLocaleString();
}

// settingsDialog opens the settings. This session is not ended from here
// (Log out does that); every other one can be.
export function settingsDialog(api) {
  const err = errorLine();
  const list = h('ul', { class: 'session-list', id: 'session-list', 'aria-label': 'Sessions' });
  const othersBtn = h('button', { type: 'button', class: 'btn danger', id: 'end-other-sessions' }, 'Log out everywhere else');

  const load = async () => {
    let sessions;
    try {
      sessions = (await api.sessions()).sessions;
    } catch (e) {
      err.show(e);
      return;
    }
    err.show(null);
    othersBtn.disabled = sessions.every((s) => s.current);
    list.replaceChildren(
      ...sessions.map((s) => {
        const end = s.current
          ? h('span', { class: 'session-current' }, 'This device')
          : h('button', { type: 'button', class: 'btn small', dataset: { session: s.id }, 'aria-label': `End the session on ${device(s.user_agent)}`, onClick: () => endOne(s) }, 'End');
        return h(
          'li',
          { class: 'session', dataset: { session: s.id, current: String(s.current) } },
          h(
            'div',
            { class: 'session-info' },
            h('span', { class: 'session-device' }, device(s.user_agent)),
            h('span', { class: 'session-meta' }, `${s.address || 'unknown address'} · last used ${when(s.last_used_at)}`),
          ),
          end,
        );
      }),
    );
  };
  const endOne = async (s) => {
    try {
      await api.endSession(s.id);
    } catch (e) {
      if (e.status !== 404) err.show(e); // already ended elsewhere: just refresh
    }
    load();
  };
  othersBtn.addEventListener('click', async () => {
    if (!(await confirmDialog('Log out every other browser and device of this account?', 'Log out others'))) return;
    try {
      await api.endOtherSessions();
    } catch (e) {
      err.show(e);
    }
    load();
  });

  const pwErr = errorLine();
  const oldPw = h('input', { class: 'input', id: 'old-password', type: 'password', autocomplete: 'current-password', required: true });
  const newPw = h('input', { class: 'input', id: 'new-password', type: 'password', autocomplete: 'new-password', required: true, minlength: 8 });
  const pwDone = h('p', { class: 'hint', id: 'password-done', role: 'status', hidden: true }, 'Password changed. Every other session was logged out.');
  const pwSubmit = h('button', { type: 'submit', class: 'btn primary', id: 'password-submit' }, 'Change password');
  const pwForm = h(
    'form',
    { class: 'dialog-form', id: 'password-form' },
    h('div', { class: 'field' }, h('label', { for: 'old-password' }, 'Current password'), oldPw),
    h('div', { class: 'field' }, h('label', { for: 'new-password' }, 'New password ', h('span', { class: 'hint' }, '(at least 8 characters)')), newPw),
    pwErr.el,
    pwDone,
    h('div', { class: 'dialog-actions' }, pwSubmit),
  );
  pwForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    pwErr.show(null);
    pwDone.hidden = true;
    pwSubmit.disabled = true;
    try {
      await api.changePassword(oldPw.value, newPw.value);
      oldPw.value = newPw.value = '';
      pwDone.hidden = false;
      load();
    } catch (e2) {
      pwErr.show(e2.code === 'forbidden' ? new Error('The current password is wrong.') : e2);
    } finally {
      pwSubmit.disabled = false;
    }
  });

  modal(
    'settings-dialog',
    'Settings',
    h('h3', null, 'Sessions'),
    h('p', { class: 'hint' }, 'Where this account is logged in. End a session you do not recognise.'),
    list,
    err.el,
    h('div', { class: 'dialog-actions' }, othersBtn),
    h('h3', null, 'Password'),
    pwForm,
  );
  load();
}
