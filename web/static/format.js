// Formatting of times, days and names for display.

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dayFmt = new Intl.DateTimeFormat(undefined, { weekday: 'long', month: 'long', day: 'numeric' });
const dayYearFmt = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'long', day: 'numeric' });
const shortDayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });
const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'short' });

export function formatTime(ts) {
  return timeFmt.format(new Date(ts));
}

export function formatFull(ts) {
  return fullFmt.format(new Date(ts));
}

export function dayKey(ts) {
  const d = new Date(ts);
  return `${d.getFullYear()}-${d.getMonth()}-${d.getDate()}`;
}

function startOfDay(d) {
  return new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
}

export function dayLabel(ts, now = Date.now()) {
  const d = new Date(ts);
  const today = startOfDay(new Date(now));
  const day = startOfDay(d);
  if (day === today) return 'Today';
  if (day === today - 86400000) return 'Yesterday';
  if (d.getFullYear() === new Date(now).getFullYear()) return dayFmt.format(d);
  return dayYearFmt.format(d);
}

// listTime is the short time shown in the conversation list.
export function listTime(ts, now = Date.now()) {
  if (!ts) return '';
  const d = new Date(ts);
  if (startOfDay(d) === startOfDay(new Date(now))) return timeFmt.format(d);
  return shortDayFmt.format(d);
}

export function initials(name) {
  const parts = String(name || '?').trim().split(/\s+/).filter(Boolean);
  const letters = parts.length > 1 ? parts[0][0] + parts[parts.length - 1][0] : (parts[0] || '?').slice(0, 2);
  return letters.toUpperCase();
}

// hue gives every user a stable avatar color.
export function hue(id) {
  let x = 0;
  for (const ch of String(id)) x = (x * 31 + ch.charCodeAt(0)) >>> 0;
  return x % 360;
}

export function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

export function preview(body, max = 80) {
  const flat = String(body ?? '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? flat.slice(0, max - 1) + '…' : flat;
}
