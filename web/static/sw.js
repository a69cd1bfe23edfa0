// The service worker: it shows Web Push notifications while no tab is
// open (or all are hidden) and opens the conversation on a click. Served at
// /sw.js with Service-Worker-Allowed: / so its scope is the whole site.

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));

self.addEventListener('push', (e) => {
  let data = {};
  try {
    data = e.data ? e.data.json() : {};
  } catch {
    data = {};
  }
  e.waitUntil(show(data));
});

async function show(data) {
  // A visible tab shows the message itself: no notification on top of it.
  const tabs = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  if (tabs.some((c) => c.visibilityState === 'visible' && c.focused)) return;
  const title = data.from_name ? `${data.from_name}` : 'New message';
  await self.registration.showNotification(title, {
    body: data.preview ?? 'New message',
    // One notification per conversation: a newer push replaces the older.
    tag: data.conv ? `conv:${data.conv}` : 'imserver',
    renotify: true,
    icon: '/favicon.svg',
    data: { conv: data.conv ?? null },
  });
}

self.addEventListener('notificationclick', (e) => {
  e.notification.close();
  const conv = e.notification.data?.conv;
  const url = new URL(conv ? `/#/c/${encodeURIComponent(conv)}` : '/', self.location.origin).href;
  e.waitUntil(
    (async () => {
      const tabs = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
      const tab = tabs.find((c) => new URL(c.url).origin === self.location.origin);
      if (tab) {
        await tab.focus();
        if (conv) tab.postMessage({ type: 'open-conv', conv });
        return;
      }
      await self.clients.openWindow(url);
    })(),
  );
});
