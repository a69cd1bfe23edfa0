// The WebSocket half of PROTOCOL.md: one connection, reconnected with
// exponential backoff and jitter, requests matched to replies by `req`.

const PING_EVERY_MS = 20000;
const DEAD_AFTER_MS = 50000;
const MAX_BACKOFF_MS = 30000;

export class SocketError extends Error {
  constructor(code, message, retryAfterMs) {
    super(message || code);
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }

  get network() {
    return this.code === 'offline' || this.code === 'disconnected' || this.code === 'timeout' || this.code === 'unavailable';
  }
}

export class Socket {
  // url() builds the address on every attempt (it may return a promise: a
  // fresh one-time ticket per connect);
  // onFrame gets every frame that is not a reply to a request; onState gets
  // {state, retryAt, attempt}; onConnectFailed runs when a connection closes
  // before its hello (the token may have been revoked).
  constructor({ url, onFrame, onState, onConnectFailed }) {
    this.url = url;
    this.onFrame = onFrame;
    this.onStateChange = onState;
    this.onConnectFailed = onConnectFailed;
    this.ws = null;
    this.state = 'stopped';
    this.attempt = 0;
    this.retryAt = 0;
    this.retryTimer = null;
    this.pingTimer = null;
    this.lastIn = 0;
    this.reqSeq = 0;
    this.waiting = new Map();
    this.stopped = true;
    this.onOnline = () => {
      this.attempt = 0;
      if (this.state === 'offline') this.connect();
    };
    this.onOffline = () => {
      // The browser knows the network is gone; a socket would only notice
      // after a long TCP timeout, so give it up now and show it.
      if (this.ws) this.drop();
    };
    // A page that is left may be kept in the back/forward cache with its
    // socket open: the server would show us online and send us frames
    // nobody sees. Close it, and connect again if the page comes back.
    this.onPageHide = () => {
      if (this.ws) this.drop();
    };
    this.onPageShow = (e) => {
      if (e.persisted && this.state === 'offline') this.onOnline();
    };
  }

  get online() {
    return this.state === 'online';
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    window.addEventListener('online', this.onOnline);
    window.addEventListener('offline', this.onOffline);
    window.addEventListener('pagehide', this.onPageHide);
    window.addEventListener('pageshow', this.onPageShow);
    this.connect();
  }

  stop() {
    this.stopped = true;
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    window.removeEventListener('pagehide', this.onPageHide);
    window.removeEventListener('pageshow', this.onPageShow);
    clearTimeout(this.retryTimer);
    this.stopPing();
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onclose = ws.onmessage = ws.onerror = null;
      try {
        ws.close(1000);
      } catch {
        // already closing
      }
    }
    this.failWaiting('disconnected');
    this.setState('stopped');
  }

  retryNow() {
    if (this.state === 'offline') {
      this.attempt = 0;
      this.connect();
    }
  }

  setState(state) {
    this.state = state;
    this.onStateChange?.({ state, retryAt: this.retryAt, attempt: this.attempt });
  }

  connect() {
    clearTimeout(this.retryTimer);
    if (this.stopped) return;
    this.setState('connecting');
    const attempt = (this.connectSeq = (this.connectSeq ?? 0) + 1);
    Promise.resolve()
      .then(() => this.url())
      .then(
        (url) => {
          // stop() or a newer connect() came while the address was made.
          if (this.stopped || attempt !== this.connectSeq) return;
          this.open(url);
        },
        (err) => {
          if (this.stopped || attempt !== this.connectSeq) return;
          console.warn('websocket address:', err);
          this.scheduleRetry();
        },
      );
  }

  open(url) {
    let ws;
    try {
      ws = new WebSocket(url);
    } catch (err) {
      console.warn('websocket:', err);
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    let hello = false;
    ws.onmessage = (ev) => {
      if (this.ws !== ws) return;
      this.lastIn = Date.now();
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (f.type === 'hello') {
        hello = true;
        this.attempt = 0;
        this.setState('online');
        this.startPing();
      }
      if (f.req !== undefined && this.waiting.has(f.req)) {
        const w = this.waiting.get(f.req);
        this.waiting.delete(f.req);
        clearTimeout(w.timer);
        if (f.type === 'error') {
          w.reject(new SocketError(f.code || 'error', f.message, f.retry_after_ms ?? f.error?.retry_after_ms));
        } else w.resolve(f);
        return;
      }
      this.onFrame(f);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.closed(hello);
    };
    ws.onerror = () => {
      // onclose follows and does the work.
    };
  }

  // drop abandons the current socket at once, without waiting for a closing
  // handshake that may never come.
  drop() {
    const ws = this.ws;
    if (!ws) return;
    ws.onclose = ws.onmessage = ws.onerror = null;
    try {
      ws.close(4000, 'client gave up');
    } catch {
      // ignore
    }
    this.closed(true);
  }

  closed(hadHello) {
    this.ws = null;
    this.stopPing();
    this.failWaiting('disconnected');
    if (this.stopped) return;
    if (!hadHello) this.onConnectFailed?.();
    this.scheduleRetry();
  }

  scheduleRetry() {
    const base = Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt);
    const delay = Math.round(base / 2 + (Math.random() * base) / 2);
    this.attempt++;
    this.retryAt = Date.now() + delay;
    this.retryTimer = setTimeout(() => this.connect(), delay);
    this.setState('offline');
  }

  startPing() {
    this.stopPing();
    this.pingTimer = setInterval(() => {
      if (Date.now() - this.lastIn > DEAD_AFTER_MS) {
        this.drop();
        return;
      }
      this.send({ type: 'ping' });
    }, PING_EVERY_MS);
  }

  stopPing() {
    clearInterval(this.pingTimer);
    this.pingTimer = null;
  }

  failWaiting(code) {
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(new SocketError(code));
    }
    this.waiting.clear();
  }

  // send writes a frame if the connection is up; false means it was not sent.
  send(frame) {
    if (!this.ws || this.state !== 'online' || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  // request sends a frame with a fresh `req` and resolves with the reply.
  request(frame, timeoutMs = 15000) {
    return new Promise((resolve, reject) => {
      const req = `r${++this.reqSeq}`;
      if (!this.send({ ...frame, req })) {
        reject(new SocketError('offline'));
        return;
      }
      const timer = setTimeout(() => {
        this.waiting.delete(req);
        reject(new SocketError('timeout', 'The server did not answer in time.'));
      }, timeoutMs);
      this.waiting.set(req, { resolve, reject, timer });
    });
  }
}
