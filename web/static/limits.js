// Limits of the server that the composer checks before sending, so that a
// refused message does not cost the person its text.

// MAX_BODY_BYTES is the server's default limits.max_body_bytes
// (PROTOCOL.md, "Limits"). The server does not tell clients its setting;
// a server configured lower still refuses with too_large, and the failed
// message keeps its Retry and Discard buttons.
export const MAX_BODY_BYTES = 16384;

const encoder = new TextEncoder();

// bodyTooLong returns why body cannot be sent, saying by how much it is too
// long, or null when it fits. The limit counts bytes of UTF-8.
export function bodyTooLong(body, max = MAX_BODY_BYTES) {
  const bytes = encoder.encode(body).length;
  if (bytes <= max) return null;
  const over = bytes - max;
  // In plain ASCII a byte is a character; otherwise say bytes.
  const unit = bytes === body.length ? plural(over, 'character', 'characters') : plural(over, 'byte', 'bytes');
  return `The message is too long: ${unit} over the limit of ${max.toLocaleString('en')} bytes. Shorten it to send it.`;
}

function plural(n, one, many) {
  return `${n.toLocaleString('en')} ${n === 1 ? one : many}`;
}
