// Small helpers shared by the client modules: an event emitter, ids, timers.

export class Emitter {
  constructor() {
    this.handlers = new Map();
  }

  on(type, fn) {
    if (!this.handlers.has(type)) this.handlers.set(type, new Set());
    this.handlers.get(type).add(fn);
    return () => this.handlers.get(type)?.delete(fn);
  }

  emit(type, ...args) {
    for (const fn of this.handlers.get(type) ?? []) {
      try {
        fn(...args);
      } catch (err) {
        console.error('handler for', type, 'failed:', err);
      }
    }
  }
}

// newClientMsgId makes a random id for client_msg_id. crypto.randomUUID exists
// only in secure contexts, and imserver is often reached over plain http on a
// LAN address, so build it from getRandomValues, which works everywhere.
export function newClientMsgId() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// frame runs fn before the next paint. Hidden tabs get no animation frames, so
// fall back to a timer there: the model keeps changing while the tab is hidden
// and the DOM should be current when it is shown again.
export function frame(fn) {
  if (document.hidden) return setTimeout(fn, 50);
  return requestAnimationFrame(fn);
}

// Coalescer batches calls to fn: at most one run per frame, however many
// schedule() calls came in between.
export class Coalescer {
  constructor(fn) {
    this.fn = fn;
    this.queued = false;
  }

  schedule() {
    if (this.queued) return;
    this.queued = true;
    frame(() => {
      this.queued = false;
      this.fn();
    });
  }
}

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
