// The HTTP half of PROTOCOL.md. Every call returns the decoded JSON body, or
// throws an ApiError with the server's error code.

export class ApiError extends Error {
  constructor(status, code, message, retryAfterMs) {
    super(message || code);
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }

  // network is true when the request never got an answer: worth retrying.
  get network() {
    return this.status === 0 || this.status === 503;
  }
}

export function createApi({ getToken, onUnauthorized }) {
  async function request(method, path, body) {
    const headers = {};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    let res;
    try {
      res = await fetch(`/api/v1${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
      });
    } catch {
      throw new ApiError(0, 'network', 'The server cannot be reached.');
    }
    if (res.status === 204) return null;
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    if (!res.ok) {
      const err = data?.error ?? {};
      // A 401 on a request that carried a token means the token is gone
      // (logged out elsewhere, revoked): back to the login screen.
      if (res.status === 401 && token) onUnauthorized?.();
      let retry = err.retry_after_ms;
      if (retry === undefined && res.headers.get('Retry-After')) {
        retry = Number(res.headers.get('Retry-After')) * 1000;
      }
      throw new ApiError(res.status, err.code || `http_${res.status}`, err.message || res.statusText, retry);
    }
    return data;
  }

  // upload sends a file's bytes with XMLHttpRequest, which (unlike fetch)
  // reports upload progress. It returns { done: Promise<file>, abort }.
  function upload(file, name, onProgress) {
    const xhr = new XMLHttpRequest();
    const done = new Promise((resolve, reject) => {
      xhr.open('POST', `/api/v1/files?name=${encodeURIComponent(name)}`);
      const token = getToken();
      if (token) xhr.setRequestHeader('Authorization', `Bearer ${token}`);
      if (file.type) xhr.setRequestHeader('Content-Type', file.type);
      xhr.upload.onprogress = (e) => onProgress?.(e.loaded, e.lengthComputable ? e.total : file.size);
      xhr.onload = () => {
        let data = null;
        try {
          data = JSON.parse(xhr.responseText);
        } catch {
          data = null;
        }
        if (xhr.status === 201 && data?.file) return resolve(data.file);
        const err = data?.error ?? {};
        if (xhr.status === 401 && token) onUnauthorized?.();
        reject(new ApiError(xhr.status, err.code || `http_${xhr.status}`, err.message || xhr.statusText));
      };
      xhr.onerror = () => reject(new ApiError(0, 'network', 'The server cannot be reached.'));
      xhr.onabort = () => reject(new ApiError(0, 'aborted', 'Upload cancelled.'));
      xhr.send(file);
    });
    return { done, abort: () => xhr.abort() };
  }

  const enc = encodeURIComponent;
  const get = (path) => request('GET', path);
  const post = (path, body) => request('POST', path, body ?? {});

  return {
    // call is any request of the protocol (newer endpoints use it).
    call: (method, path, body) => request(method, path, body),
    register: (username, password, displayName) =>
      post('/auth/register', displayName ? { username, password, display_name: displayName } : { username, password }),
    login: (username, password) => post('/auth/login', { username, password }),
    logout: () => post('/auth/logout'),
    ticket: () => post('/auth/ticket'),
    changePassword: (oldPassword, newPassword) => post('/auth/password', { old_password: oldPassword, new_password: newPassword }),
    sessions: () => get('/sessions'),
    endSession: (id) => request('DELETE', `/sessions/${enc(id)}`),
    endOtherSessions: () => request('DELETE', '/sessions?others=true'),
    me: () => get('/me'),
    searchUsers: (q, limit = 50) => get(`/users?q=${enc(q)}&limit=${limit}`),
    conversations: (since, limit) => get(`/conversations?since=${since}&limit=${limit}`),
    conversation: (id) => get(`/conversations/${enc(id)}`),
    createDirect: (userId) => post('/conversations/direct', { user_id: userId }),
    createGroup: (name, memberIds) => post('/groups', { name, member_ids: memberIds }),
    members: (id) => get(`/conversations/${enc(id)}/members`),
    addMembers: (id, userIds) => post(`/conversations/${enc(id)}/members`, { user_ids: userIds }),
    kick: (id, userId) => request('DELETE', `/conversations/${enc(id)}/members/${enc(userId)}`),
    setRole: (id, userId, role) => request('PATCH', `/conversations/${enc(id)}/members/${enc(userId)}`, { role }),
    rename: (id, name) => request('PATCH', `/conversations/${enc(id)}`, { name }),
    leave: (id) => post(`/conversations/${enc(id)}/leave`),
    clear: (id) => post(`/conversations/${enc(id)}/clear`),
    // extra: the v1.1 fields (kind, target, emoji, on, reply_to, attachments).
    send: (id, clientMsgId, body, extra) =>
      post(`/conversations/${enc(id)}/messages`, { ...extra, client_msg_id: clientMsgId, body }),
    // cursor: the next of the page before (pages across conversations).
    search: (q, { conv, beforeSeq, cursor, limit = 20 } = {}) =>
      get(
        `/search?q=${enc(q)}&limit=${limit}${conv ? `&conv=${enc(conv)}` : ''}${beforeSeq ? `&before_seq=${beforeSeq}` : ''}${
          cursor ? `&cursor=${enc(cursor)}` : ''
        }`,
      ),
    uploadFile: (file, name, onProgress) => upload(file, name, onProgress),
    messagesAfter: (id, afterSeq, limit) => get(`/conversations/${enc(id)}/messages?after_seq=${afterSeq}&limit=${limit}`),
    messagesBefore: (id, beforeSeq, limit) =>
      get(`/conversations/${enc(id)}/messages?before_seq=${beforeSeq}&limit=${limit}`),
    ack: (id, seq) => post(`/conversations/${enc(id)}/ack`, { seq }),
    read: (id, seq) => post(`/conversations/${enc(id)}/read`, { seq }),
  };
}
