// The login and registration screen.

import { h } from './dom.js';

export function authView({ api, onSession, notice }) {
  let mode = 'login';
  const username = h('input', { class: 'input', id: 'username', name: 'username', autocomplete: 'username', required: true, autocapitalize: 'none', spellcheck: 'false' });
  const password = h('input', { class: 'input', id: 'password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const display = h('input', { class: 'input', id: 'display-name', name: 'display_name', autocomplete: 'name' });
  const displayRow = h('div', { class: 'field', hidden: true }, h('label', { for: 'display-name' }, 'Display name ', h('span', { class: 'hint' }, '(optional)')), display);
  const error = h('p', { class: 'form-error', id: 'auth-error', role: 'alert', hidden: !notice }, notice ?? '');
  const submit = h('button', { type: 'submit', class: 'btn primary wide', id: 'auth-submit' }, 'Log in');
  const loginTab = h('button', { type: 'button', class: 'tab', id: 'mode-login', 'aria-pressed': 'true' }, 'Log in');
  const registerTab = h('button', { type: 'button', class: 'tab', id: 'mode-register', 'aria-pressed': 'false' }, 'Create account');

  const setMode = (m) => {
    mode = m;
    loginTab.setAttribute('aria-pressed', String(m === 'login'));
    registerTab.setAttribute('aria-pressed', String(m === 'register'));
    displayRow.hidden = m !== 'register';
    password.autocomplete = m === 'register' ? 'new-password' : 'current-password';
    submit.textContent = m === 'register' ? 'Create account' : 'Log in';
    error.hidden = true;
  };
  loginTab.addEventListener('click', () => setMode('login'));
  registerTab.addEventListener('click', () => setMode('register'));

  const form = h(
    'form',
    { class: 'auth-form', id: 'auth-form', 'aria-labelledby': 'auth-title' },
    h('h1', { id: 'auth-title' }, 'imserver'),
    h('p', { class: 'hint' }, 'Team chat on your own server.'),
    h('div', { class: 'tabs', role: 'group', 'aria-label': 'Log in or create an account' }, loginTab, registerTab),
    h('div', { class: 'field' }, h('label', { for: 'username' }, 'Username'), username),
    h('div', { class: 'field' }, h('label', { for: 'password' }, 'Password'), password),
    displayRow,
    error,
    submit,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const res =
        mode === 'register'
          ? await api.register(username.value.trim(), password.value, display.value.trim())
          : await api.login(username.value.trim(), password.value);
      onSession(res.user, res.token);
    } catch (err) {
      error.textContent = authError(err, mode);
      error.hidden = false;
      submit.disabled = false;
      password.focus();
    }
  });
  queueMicrotask(() => username.focus());
  return h('main', { class: 'auth' }, form);
}

function authError(err, mode) {
  // A disabled account's right password is a 401 like a wrong one, saying so.
  if (err.code === 'unauthorized' && /disabled/.test(err.message ?? '')) return 'This account is disabled.';
  if (err.code === 'unauthorized') return 'Wrong username or password.';
  if (err.code === 'conflict') return 'That username is taken.';
  if (err.code === 'forbidden' && mode === 'register') return 'Registration is closed on this server.';
  if (err.code === 'rate_limited') return 'Too many failed attempts. Try again in a minute.';
  if (err.code === 'network') return 'The server cannot be reached.';
  return err.message || 'Something went wrong.';
}
