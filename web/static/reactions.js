// Reactions under a message: one chip per emoji with its count (mine
// marked, the title names who reacted), a click toggles my own; and a small
// picker of common emoji.

import { h } from './dom.js';

export const COMMON_EMOJI = ['👍', '❤️', '😂', '🎉', '😮', '😢', '🙏', '👀'];

// reactionsEl renders m.reactions, or null when there are none.
//   name(id) -> display name; onToggle(emoji, on)
export function reactionsEl(m, { me, name, onToggle, onAdd }) {
  const list = m.reactions ?? [];
  if (!list.length || m.deleted) return null;
  return h(
    'div',
    { class: 'reactions' },
    ...list.map((r) => {
      const mine = r.users.includes(me);
      const who = r.users.map((id) => (id === me ? 'You' : name(id)));
      return h(
        'button',
        {
          type: 'button',
          class: `reaction${mine ? ' mine' : ''}`,
          title: `${listNames(who)} reacted with ${r.emoji}`,
          'aria-pressed': mine ? 'true' : 'false',
          'aria-label': `${r.emoji} ${r.users.length}, ${listNames(who)}`,
          dataset: { emoji: r.emoji, count: String(r.users.length) },
          onClick: () => onToggle(r.emoji, !mine),
        },
        h('span', { class: 'reaction-emoji' }, r.emoji),
        h('span', { class: 'reaction-count' }, String(r.users.length)),
      );
    }),
    h('button', { type: 'button', class: 'reaction add', title: 'Add reaction', 'aria-label': 'Add reaction', onClick: (e) => onAdd(e.currentTarget) }, '+'),
  );
}

function listNames(names) {
  if (names.length <= 1) return names.join('');
  return `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;
}

// openPicker shows the emoji picker next to anchor; onPick(emoji). Escape,
// a click elsewhere, focus leaving it or a pick closes it.
export function openPicker(anchor, onPick) {
  closePicker();
  const picker = h(
    'div',
    { class: 'emoji-picker', id: 'emoji-picker', role: 'menu', 'aria-label': 'Pick a reaction' },
    ...COMMON_EMOJI.map((e) =>
      h('button', { type: 'button', class: 'emoji', role: 'menuitem', dataset: { emoji: e }, 'aria-label': `React with ${e}`, onClick: () => { closePicker(); onPick(e); } }, e),
    ),
  );
  document.body.append(picker);
  const r = anchor.getBoundingClientRect();
  const pw = picker.offsetWidth;
  const ph = picker.offsetHeight;
  const left = Math.max(8, Math.min(innerWidth - pw - 8, r.left + r.width / 2 - pw / 2));
  const top = r.top - ph - 6 >= 8 ? r.top - ph - 6 : Math.min(innerHeight - ph - 8, r.bottom + 6);
  picker.style.left = `${left}px`;
  picker.style.top = `${top}px`;
  picker.querySelector('button').focus();
  const away = (e) => {
    if (e.type === 'keydown' ? e.key === 'Escape' : !picker.contains(e.target)) {
      closePicker();
      if (e.type === 'keydown') {
        // Escape closes the picker only, not the conversation (phone).
        e.stopPropagation();
        anchor.focus?.();
      }
    }
  };
  picker.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
    const btns = [...picker.querySelectorAll('button')];
    const i = btns.indexOf(document.activeElement);
    btns[(i + (e.key === 'ArrowRight' ? 1 : btns.length - 1)) % btns.length].focus();
    e.preventDefault();
  });
  // Focus that moves out of the picker (Tab, Shift+Tab) closes it, as a
  // click elsewhere does; the window losing focus leaves focus inside.
  picker.addEventListener('focusout', (e) => {
    if (e.relatedTarget && picker.contains(e.relatedTarget)) return;
    setTimeout(() => {
      if (picker.isConnected && !picker.contains(document.activeElement)) closePicker();
    });
  });
  setTimeout(() => {
    document.addEventListener('pointerdown', away, true);
    document.addEventListener('keydown', away, true);
  });
  closePicker.current = () => {
    document.removeEventListener('pointerdown', away, true);
    document.removeEventListener('keydown', away, true);
    picker.remove();
  };
}

export function closePicker() {
  closePicker.current?.();
  closePicker.current = null;
}
