// Entry point: session handling (login, token in localStorage, logout),
// the application shell, routing by location.hash, the connection indicator
// and keyboard shortcuts.

import { createApi } from './api.js';
import { Users } from './users.js';
import { ChatClient } from './chat.js';
import { ConvList } from './convlist.js';
import { ConversationView } from './conversation.js';
import { SearchPanel } from './search.js';
import { authView } from './auth.js';
import { detailsDialog, newDirectDialog, newGroupDialog } from './dialogs.js';
import { h } from './dom.js';
import { settingsDialog } from './settings.js';
import { setupNotifications } from './notify.js';
import { inviteCode, invitesDialog, joinView } from './invites.js';
import { adminDialog, isAdmin } from './admin.js';
import { draftsKey } from './drafts.js';

const TOKEN_KEY = 'imserver.token';
const USER_KEY = 'imserver.user';
const app = document.getElementById('app');

let session = null;

const api = createApi({
  getToken: () => session?.token ?? null,
  onUnauthorized: () => endSession('Your session has ended. Please log in again.'),
});

function showLogin(notice) {
  document.title = 'imserver';
  app.replaceChildren(
    authView({
      api,
      notice,
      onSession: (user, token) => {
        localStorage.setItem(TOKEN_KEY, token);
        localStorage.setItem(USER_KEY, JSON.stringify(user));
        startSession(user, token);
      },
    }),
  );
}

function saveSession(user, token) {
  localStorage.setItem(TOKEN_KEY, token);
  localStorage.setItem(USER_KEY, JSON.stringify(user));
  startSession(user, token);
}

async function boot() {
  const token = localStorage.getItem(TOKEN_KEY);
  const code = inviteCode();
  if (code && !token) {
    document.title = 'Join · imserver';
    app.replaceChildren(joinView({ api, code, onSession: saveSession }));
    return;
  }
  // Logged in already: the invite is for someone else.
  if (code) history.replaceState(null, '', '/');
  if (!token) {
    showLogin();
    return;
  }
  let user = null;
  try {
    user = JSON.parse(localStorage.getItem(USER_KEY) || 'null');
  } catch {
    user = null;
  }
  session = { token };
  try {
    user = (await api.me()).user;
    localStorage.setItem(USER_KEY, JSON.stringify(user));
  } catch (err) {
    if (err.status === 401) return; // onUnauthorized showed the login screen
    if (!user) {
      app.replaceChildren(
        h(
          'main',
          { class: 'auth' },
          h('div', { class: 'auth-form' }, h('h1', null, 'imserver'), h('p', { role: 'alert' }, 'The server cannot be reached.'), h('button', { type: 'button', class: 'btn primary wide', onClick: () => location.reload() }, 'Try again')),
        ),
      );
      return;
    }
    // Known user, server away: start anyway, the socket keeps retrying.
  }
  startSession(user, token);
}

function startSession(user, token) {
  session?.client?.stop();
  const users = new Users(api);
  users.put(user);
  const client = new ChatClient({ api, users, me: user, token });
  session = { token, user, users, client };

  const open = (id) => {
    location.hash = `#/c/${encodeURIComponent(id)}`;
  };
  const list = new ConvList(client, users, {
    onNewDirect: () => newDirectDialog(client, open),
    onNewGroup: () => newGroupDialog(client, open),
  });
  const view = new ConversationView(client, users, {
    onBack: () => {
      location.hash = '#/';
    },
    onDetails: (id) => detailsDialog(client, id, { onLeft: () => {} }),
  });
  session.list = list;
  session.view = view;
  const search = new SearchPanel(client, users, { onOpen: (id, seq) => view.openAt(id, seq), container: list.root });
  list.root.querySelector('.sidebar-tools').prepend(search.root);
  list.root.insertBefore(search.panel, list.listEl);

  const connText = h('span', { class: 'conn-text' });
  const retryBtn = h('button', { type: 'button', class: 'link', id: 'conn-retry', hidden: true, onClick: () => client.socket.retryNow() }, 'Retry now');
  const conn = h('div', { class: 'conn', id: 'conn-state', role: 'status', dataset: { state: 'connecting' } }, h('span', { class: 'dot', 'aria-hidden': 'true' }), connText, retryBtn);
  const toast = h('div', { class: 'toast', id: 'toast', role: 'status', 'aria-live': 'polite', hidden: true });
  const notifyBtn = setupNotifications({ api, client, me: user, onOpen: open });
  const adminBtn = h('button', { type: 'button', class: 'btn', id: 'admin-btn', hidden: true, onClick: () => adminDialog(api, user) }, 'Admin');
  isAdmin(api).then((yes) => (adminBtn.hidden = !yes));
  const shell = h(
    'div',
    { class: 'shell', id: 'shell' },
    h(
      'header',
      { class: 'topbar' },
      h('span', { class: 'brand' }, 'imserver'),
      conn,
      h('span', { class: 'spacer' }),
      notifyBtn,
      h('button', { type: 'button', class: 'btn', id: 'invite-btn', onClick: () => invitesDialog(api) }, 'Invite'),
      adminBtn,
      h('span', { class: 'me', id: 'me-name', dir: 'auto', title: `@${user.username}` }, user.display_name || user.username),
      h('button', { type: 'button', class: 'btn', id: 'settings-btn', onClick: () => settingsDialog(api) }, 'Settings'),
      h('button', { type: 'button', class: 'btn', id: 'logout-btn', onClick: logout }, 'Log out'),
    ),
    h('div', { class: 'main' }, list.root, view.root),
    toast,
  );
  app.replaceChildren(shell);

  let countdown = null;
  const showConn = (s) => {
    clearInterval(countdown);
    conn.dataset.state = s.state;
    retryBtn.hidden = s.state !== 'offline';
    const paint = () => {
      if (s.state === 'online') connText.textContent = 'Connected';
      else if (s.state === 'connecting') connText.textContent = 'Connecting…';
      else if (s.state === 'offline') {
        const secs = Math.max(0, Math.ceil((s.retryAt - Date.now()) / 1000));
        connText.textContent = secs > 0 ? `Offline · retrying in ${secs}s` : 'Offline · retrying…';
      } else connText.textContent = 'Disconnected';
    };
    paint();
    if (s.state === 'offline') countdown = setInterval(paint, 1000);
  };
  client.on('conn', showConn);

  let toastTimer = null;
  client.on('notice', (text) => {
    toast.textContent = text;
    toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (toast.hidden = true), 5000);
  });

  const updateTitle = () => {
    const n = client.totalUnread();
    const conv = view.convId ? client.convs.get(view.convId) : null;
    document.title = `${n ? `(${n}) ` : ''}${conv ? `${client.title(conv)} · ` : ''}imserver`;
  };
  client.on('convs', updateTitle);
  users.on('change', updateTitle);

  const route = () => {
    if (session?.client !== client) return;
    const m = location.hash.match(/^#\/c\/(.+)$/);
    if (m) {
      const id = decodeURIComponent(m[1]);
      shell.classList.add('has-open');
      list.setActive(id);
      view.show(id);
    } else {
      shell.classList.remove('has-open');
      list.setActive(null);
      view.showEmpty();
    }
    updateTitle();
  };
  session.route = route;

  client.start().then(route);
}

function endSession(notice) {
  if (!session) return;
  session.client?.stop();
  session = null;
  localStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(USER_KEY);
  for (const d of document.querySelectorAll('dialog')) d.remove();
  if (location.hash) history.replaceState(null, '', location.pathname);
  showLogin(notice);
}

async function logout() {
  if (!session) return;
  const client = session.client;
  // Logging out on purpose drops unsent messages and drafts with the
  // session; an expired token keeps them for the next login.
  localStorage.removeItem(`imserver.outbox.${session.user.id}`);
  localStorage.removeItem(draftsKey(session.user.id));
  client.flushReads();
  client.flushAcks();
  try {
    await api.logout();
  } catch {
    // The token is forgotten here either way.
  }
  endSession();
}

window.addEventListener('hashchange', () => session?.route?.());

// Another tab of this browser logged out or in: follow it.
window.addEventListener('storage', (e) => {
  if (e.key !== TOKEN_KEY) return;
  if (!e.newValue) endSession('You logged out in another tab.');
  else if (e.newValue !== session?.token) location.reload();
});

document.addEventListener('keydown', (e) => {
  if (!session?.list || document.querySelector('dialog[open]')) return;
  const mod = e.ctrlKey || e.metaKey;
  if (mod && e.key.toLowerCase() === 'k') {
    e.preventDefault();
    session.list.focusFilter();
  } else if (e.altKey && (e.key === 'ArrowUp' || e.key === 'ArrowDown')) {
    const id = session.list.neighbour(e.key === 'ArrowDown' ? 1 : -1);
    if (id) {
      e.preventDefault();
      location.hash = `#/c/${encodeURIComponent(id)}`;
    }
  } else if (e.key === 'Escape' && location.hash.startsWith('#/c/') && window.matchMedia('(max-width: 720px)').matches) {
    location.hash = '#/';
  }
});

boot();
