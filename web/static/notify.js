// Notifications: the one-click "Enable notifications" prompt (never shown by
// itself: the browser asks only when the button is pressed), Web Push
// through the service worker, desktop notifications while the tab is open
// but hidden, the unread badge on the favicon, and muting conversations.

import { h } from './dom.js';

const ENABLED_KEY = 'imserver.notify';
const HOUR = 3600 * 1000;

export function isMuted(conv) {
  return (conv?.muted_until ?? 0) > Date.now();
}

function supported() {
  return 'Notification' in window;
}

// setupNotifications returns the top-bar button that turns notifications
// on for this browser.
export function setupNotifications({ api, client, me, onOpen }) {
  const btn = h('button', { type: 'button', class: 'btn', id: 'notify-enable', hidden: true, title: 'Get notified of messages while imserver is in the background' }, 'Enable notifications');
  const enabled = () => supported() && localStorage.getItem(ENABLED_KEY) === '1' && Notification.permission === 'granted';
  const paint = () => {
    btn.hidden = !supported() || enabled() || Notification.permission === 'denied';
  };
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    try {
      const perm = await Notification.requestPermission();
      if (perm === 'granted') {
        localStorage.setItem(ENABLED_KEY, '1');
        const pushed = await subscribePush(api);
        client.emit('notice', pushed ? 'Notifications are on.' : 'Notifications are on while imserver is open in a tab.');
      } else {
        client.emit('notice', 'Notifications are blocked in this browser.');
      }
    } finally {
      btn.disabled = false;
      paint();
    }
  });
  paint();
  // Already on in this browser: keep the push subscription current
  // (browsers rotate them). This never asks for anything.
  if (enabled()) subscribePush(api);

  // While this tab is open but hidden, show messages that would be
  // pushed: direct messages and mentions of me, not muted.
  client.on('message', (convId, m, live) => {
    if (!live || !enabled() || !document.hidden || m.from === me.id || (m.kind && m.kind !== 'text')) return;
    const conv = client.convs.get(convId);
    if (!conv || isMuted(conv)) return;
    const mentioned = Array.isArray(m.mentions) && m.mentions.includes(me.id);
    if (conv.kind !== 'direct' && !mentioned) return;
    const from = client.users.name?.(m.from) ?? client.users.get(m.from)?.display_name ?? 'Someone';
    const title = conv.kind === 'direct' ? from : `${from} in ${client.title(conv)}`;
    try {
      const n = new window.Notification(title, { body: m.body.slice(0, 200), tag: `conv:${convId}`, icon: '/favicon.svg' });
      n.onclick = () => {
        window.focus();
        onOpen(convId);
        n.close();
      };
    } catch {
      // Some browsers only allow notifications from the service worker.
    }
  });

  // A click on a push notification focuses this tab and asks it to open
  // the conversation.
  navigator.serviceWorker?.addEventListener('message', (e) => {
    if (e.data?.type === 'open-conv' && e.data.conv) onOpen(e.data.conv);
  });

  // The favicon shows a dot while something is unread.
  const icon = document.querySelector('link[rel="icon"]');
  let dot = null;
  client.on('convs', () => {
    const want = client.totalUnread() > 0;
    if (icon && want !== dot) {
      dot = want;
      icon.href = want ? '/favicon-unread.svg' : '/favicon.svg';
    }
  });
  return btn;
}

// subscribePush registers the service worker and subscribes to Web Push;
// false where the browser or the server cannot.
async function subscribePush(api) {
  if (!('serviceWorker' in navigator) || !('PushManager' in window)) return false;
  try {
    const { public_key: key } = await api.call('GET', '/push/key');
    const reg = await navigator.serviceWorker.register('/sw.js', { scope: '/', type: 'classic' });
    await navigator.serviceWorker.ready;
    let sub = await reg.pushManager.getSubscription();
    if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64url(key) });
    const json = sub.toJSON();
    await api.call('POST', '/push/subscriptions', { endpoint: json.endpoint, keys: json.keys });
    return true;
  } catch {
    // No push service reachable (headless browsers, some privacy
    // settings): notifications still work while a tab is open.
    return false;
  }
}

function b64url(s) {
  const pad = '='.repeat((4 - (s.length % 4)) % 4);
  const raw = atob((s + pad).replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

// muteControl is the conversation header's bell: mute for 1 h, 8 h or
// until unmuted, or unmute.
export function muteControl(api, client, getConvId) {
  const btn = h('button', { type: 'button', class: 'btn', id: 'mute-btn', 'aria-haspopup': 'menu', 'aria-expanded': 'false' }, 'Mute');
  const menu = h('div', { class: 'mute-menu', id: 'mute-menu', role: 'menu', hidden: true });
  const wrap = h('div', { class: 'mute-wrap' }, btn, menu);
  const close = () => {
    menu.hidden = true;
    btn.setAttribute('aria-expanded', 'false');
  };
  const act = async (path, body) => {
    close();
    const id = getConvId();
    if (!id) return;
    try {
      await api.call('POST', `/conversations/${encodeURIComponent(id)}/${path}`, body);
      // The server sends the new entry over the socket too; apply it now.
      const { conversation } = await api.conversation(id);
      client.applyConv(conversation);
      client.emit('convs');
    } catch (err) {
      client.emit('notice', err.message || 'Could not change the mute.');
    }
  };
  const item = (id, label, fn) => h('button', { type: 'button', class: 'mute-item', id, role: 'menuitem', onClick: fn }, label);
  const paint = () => {
    const conv = client.convs.get(getConvId());
    const muted = isMuted(conv);
    btn.textContent = muted ? '🔕 Muted' : 'Mute';
    btn.title = muted ? (conv.muted_until >= 253402300799999 ? 'Muted until you unmute' : `Muted until ${new Date(conv.muted_until).toLocaleString()}`) : 'Mute notifications';
    btn.dataset.muted = String(muted);
    menu.replaceChildren(
      ...(muted
        ? [item('unmute', 'Unmute', () => act('unmute'))]
        : [
            item('mute-1h', 'For 1 hour', () => act('mute', { until_ms: Date.now() + HOUR })),
            item('mute-8h', 'For 8 hours', () => act('mute', { until_ms: Date.now() + 8 * HOUR })),
            item('mute-forever', 'Until I unmute', () => act('mute', {})),
          ]),
    );
  };
  btn.addEventListener('click', () => {
    paint();
    menu.hidden = !menu.hidden;
    btn.setAttribute('aria-expanded', String(!menu.hidden));
  });
  document.addEventListener('click', (e) => {
    if (!wrap.contains(e.target)) close();
  });
  client.on('convs', paint);
  wrap.paint = paint;
  return wrap;
}
