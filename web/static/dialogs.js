// Modal dialogs: new direct chat, new group, conversation details (rename,
// members, add, kick, leave, clear history) and a confirmation box. They use the
// native <dialog>, which traps focus and closes on Escape.

import { h } from './dom.js';
import { debounce } from './util.js';
import { hue, initials } from './format.js';

export function modal(id, title, ...content) {
  const closeBtn = h('button', { type: 'button', class: 'btn icon close', 'aria-label': 'Close' }, '×');
  const dlg = h(
    'dialog',
    { class: 'dialog', id, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'dialog-header' }, h('h2', { id: `${id}-title` }, title), closeBtn),
    ...content,
  );
  closeBtn.addEventListener('click', () => dlg.close());
  dlg.addEventListener('close', () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  return dlg;
}

export function errorLine() {
  const el = h('p', { class: 'form-error', role: 'alert', hidden: true });
  return {
    el,
    show(err) {
      el.textContent = err ? err.message || String(err) : '';
      el.hidden = !err;
    },
  };
}

function personRow(user, ...extra) {
  const name = user.display_name || user.username;
  return [
    h('span', { class: 'avatar small', style: `--hue:${hue(user.id)}`, 'aria-hidden': 'true' }, initials(name)),
    h('span', { class: 'person' }, h('span', { class: 'person-name', dir: 'auto' }, name), h('span', { class: 'person-handle' }, `@${user.username}`)),
    ...extra,
  ];
}

// userPicker is a search box with a list of matching people as buttons.
function userPicker(client, { id, label, exclude, onPick }) {
  const input = h('input', { type: 'search', class: 'input', id, autocomplete: 'off', placeholder: 'Search by username', 'aria-label': label });
  const results = h('ul', { class: 'pick-results', id: `${id}-results`, 'aria-label': 'Search results' });
  const status = h('p', { class: 'pick-status', 'aria-live': 'polite' });
  let seq = 0;
  const run = async () => {
    const q = input.value.trim();
    const mine = ++seq;
    let users = [];
    try {
      users = await client.users.search(q);
    } catch (err) {
      if (mine === seq) status.textContent = err.message;
      return;
    }
    if (mine !== seq) return;
    const ex = exclude();
    users = users.filter((u) => u.id !== client.me.id && !ex.has(u.id));
    status.textContent = users.length ? '' : q ? 'Nobody found.' : '';
    results.replaceChildren(
      ...users.map((u) =>
        h('li', null, h('button', { type: 'button', class: 'pick', dataset: { userId: u.id, username: u.username }, onClick: () => onPick(u) }, ...personRow(u))),
      ),
    );
  };
  const search = debounce(run, 200);
  input.addEventListener('input', search);
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      results.querySelector('button')?.click();
    } else if (e.key === 'ArrowDown') {
      e.preventDefault();
      results.querySelector('button')?.focus();
    }
  });
  results.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
    const btns = [...results.querySelectorAll('button')];
    const i = btns.indexOf(document.activeElement);
    if (i < 0) return;
    e.preventDefault();
    if (e.key === 'ArrowUp' && i === 0) input.focus();
    else btns[Math.max(0, Math.min(btns.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)))].focus();
  });
  run();
  return { el: h('div', { class: 'picker' }, input, status, results), input, refresh: run };
}

export function confirmDialog(text, okLabel = 'OK') {
  return new Promise((resolve) => {
    let answer = false;
    const ok = h('button', { type: 'button', class: 'btn danger', id: 'confirm-ok' }, okLabel);
    const cancel = h('button', { type: 'button', class: 'btn', id: 'confirm-cancel' }, 'Cancel');
    const dlg = modal('confirm-dialog', 'Are you sure?', h('p', null, text), h('div', { class: 'dialog-actions' }, cancel, ok));
    dlg.setAttribute('role', 'alertdialog');
    ok.addEventListener('click', () => {
      answer = true;
      dlg.close();
    });
    cancel.addEventListener('click', () => dlg.close());
    dlg.addEventListener('close', () => resolve(answer));
    cancel.focus();
  });
}

export function newDirectDialog(client, open) {
  const err = errorLine();
  let dlg = null;
  const picker = userPicker(client, {
    id: 'direct-search',
    label: 'Find a person',
    exclude: () => new Set(),
    onPick: async (u) => {
      try {
        const id = await client.createDirect(u.id);
        dlg.close();
        open(id);
      } catch (e) {
        err.show(e);
      }
    },
  });
  dlg = modal('direct-dialog', 'New chat', h('p', { class: 'hint' }, 'Start a direct conversation with someone.'), picker.el, err.el);
  picker.input.focus();
}

export function newGroupDialog(client, open) {
  const err = errorLine();
  const chosen = new Map();
  const chips = h('ul', { class: 'chips', id: 'group-chosen', 'aria-label': 'Chosen members' });
  const renderChips = () =>
    chips.replaceChildren(
      ...[...chosen.values()].map((u) =>
        h(
          'li',
          null,
          h(
            'button',
            {
              type: 'button',
              class: 'chip',
              'aria-label': `Remove ${u.display_name || u.username}`,
              onClick: () => {
                chosen.delete(u.id);
                renderChips();
                picker.refresh();
              },
            },
            `${u.display_name || u.username} ×`,
          ),
        ),
      ),
    );
  const picker = userPicker(client, {
    id: 'group-search',
    label: 'Add people',
    exclude: () => new Set(chosen.keys()),
    onPick: (u) => {
      chosen.set(u.id, u);
      renderChips();
      picker.refresh();
      picker.input.focus();
    },
  });
  const name = h('input', { type: 'text', class: 'input', id: 'group-name', required: true, maxlength: '100', autocomplete: 'off' });
  const form = h(
    'form',
    { class: 'dialog-form' },
    h('label', { for: 'group-name' }, 'Group name'),
    name,
    h('label', { for: 'group-search' }, 'Members'),
    chips,
    picker.el,
    err.el,
    h('div', { class: 'dialog-actions' }, h('button', { type: 'submit', class: 'btn primary', id: 'group-create' }, 'Create group')),
  );
  const dlg = modal('group-dialog', 'New group', form);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!name.value.trim()) {
      err.show(new Error('Give the group a name.'));
      name.focus();
      return;
    }
    try {
      const id = await client.createGroup(name.value.trim(), [...chosen.keys()]);
      dlg.close();
      open(id);
    } catch (e2) {
      err.show(e2);
    }
  });
  name.focus();
}

export function detailsDialog(client, convId, { onLeft }) {
  const conv = client.convs.get(convId);
  if (!conv) return;
  const err = errorLine();
  const list = h('ul', { class: 'member-list', id: 'member-list', 'aria-label': 'Members' });
  const addBox = h('div', { class: 'add-members', hidden: true });
  const actions = h('div', { class: 'dialog-actions spread' });
  // The owner and admins rename a group.
  const nameInput = h('input', { type: 'text', class: 'input', id: 'rename-input', maxlength: '128', 'aria-label': 'Group name', value: conv.name ?? '' });
  const renameForm = h(
    'form',
    { class: 'rename-form', id: 'rename-form', hidden: true },
    nameInput,
    h('button', { type: 'submit', class: 'btn small', id: 'rename-btn' }, 'Rename'),
  );
  const body = h('div', { class: 'dialog-form' }, renameForm, h('h3', null, 'Members'), list, addBox, err.el, actions);
  const dlg = modal('details-dialog', client.title(conv), body);

  const guard = (fn) => async (...args) => {
    err.show(null);
    try {
      await fn(...args);
    } catch (e) {
      err.show(e);
    }
  };

  const picker = userPicker(client, {
    id: 'add-search',
    label: 'Add a member',
    exclude: () => new Set(client.members.get(convId)?.keys() ?? []),
    onPick: guard(async (u) => {
      await client.addMembers(convId, [u.id]);
      picker.input.value = '';
      picker.refresh();
    }),
  });
  addBox.append(h('h3', null, 'Add members'), picker.el);
  renameForm.addEventListener(
    'submit',
    guard(async (e) => {
      e.preventDefault();
      await client.rename(convId, nameInput.value);
    }),
  );

  const render = () => {
    const c = client.convs.get(convId) ?? conv;
    const map = client.members.get(convId);
    const role = client.myRole(convId);
    const manager = (role === 'owner' || role === 'admin') && !c.left;
    addBox.hidden = !(manager && c.kind === 'group');
    renameForm.hidden = !(manager && c.kind === 'group');
    dlg.querySelector('#details-dialog-title').textContent = client.title(c);
    const rows = [];
    const rank = { owner: 0, admin: 1 };
    const members = [...(map?.values() ?? [])].sort(
      (a, b) => (rank[a.role] ?? 2) - (rank[b.role] ?? 2) || client.users.name(a.user_id).localeCompare(client.users.name(b.user_id)),
    );
    for (const m of members) {
      const u = client.users.get(m.user_id) ?? { id: m.user_id, username: '…', display_name: client.users.name(m.user_id) };
      const me = m.user_id === client.me.id;
      const kickable = manager && c.kind === 'group' && !me && m.role !== 'owner';
      const online = me ? client.conn.state === 'online' : client.presence.isOnline(m.user_id);
      const name = u.display_name || u.username;
      // The owner makes admins, takes the role back and hands the group
      // over (becoming an admin).
      const roleButtons =
        role === 'owner' && c.kind === 'group' && !c.left && !me
          ? [
              h(
                'button',
                {
                  type: 'button',
                  class: 'btn small role-btn',
                  'aria-label': m.role === 'admin' ? `Remove ${name} as admin` : `Make ${name} an admin`,
                  onClick: guard(() => client.setRole(convId, m.user_id, m.role === 'admin' ? 'member' : 'admin')),
                },
                m.role === 'admin' ? 'Remove admin' : 'Make admin',
              ),
              h(
                'button',
                {
                  type: 'button',
                  class: 'btn small owner-btn',
                  'aria-label': `Make ${name} the owner`,
                  onClick: guard(async () => {
                    if (await confirmDialog(`Make ${name} the owner of ${client.title(c)}? You will be an admin.`, 'Make owner')) {
                      await client.setRole(convId, m.user_id, 'owner');
                    }
                  }),
                },
                'Make owner',
              ),
            ]
          : [];
      const kickBtn = kickable
          ? h(
              'button',
              {
                type: 'button',
                class: 'btn small danger kick-btn',
                'aria-label': `Remove ${u.display_name || u.username}`,
                onClick: guard(async () => {
                  if (await confirmDialog(`Remove ${u.display_name || u.username} from ${client.title(c)}?`, 'Remove')) {
                    await client.kick(convId, m.user_id);
                  }
                }),
              },
              'Remove',
            )
          : null;
      const actions = [...roleButtons, kickBtn].filter(Boolean);
      // The buttons wrap under the name when the row is too narrow.
      const cells = personRow(
        u,
        h('span', { class: `role role-${m.role}` }, me ? `${m.role} · you` : m.role),
        actions.length ? h('span', { class: 'member-actions' }, ...actions) : null,
      );
      cells[0].append(h('span', { class: `presence-dot${online ? ' online' : ''}`, title: online ? 'Online' : 'Offline' }));
      rows.push(h('li', { class: 'member', dataset: { userId: m.user_id, role: m.role, online: String(online) } }, ...cells));
    }
    if (!map) rows.push(h('li', { class: 'hint' }, c.left ? 'You are no longer a member.' : 'Loading…'));
    list.replaceChildren(...rows);
    actions.replaceChildren(
      h(
        'button',
        {
          type: 'button',
          class: 'btn',
          id: 'clear-btn',
          onClick: guard(async () => {
            if (await confirmDialog('Clear your history of this conversation? Others keep theirs.', 'Clear history')) {
              await client.clear(convId);
            }
          }),
        },
        'Clear history',
      ),
      c.kind === 'group' && !c.left
        ? h(
            'button',
            {
              type: 'button',
              class: 'btn danger',
              id: 'leave-btn',
              onClick: guard(async () => {
                if (await confirmDialog(`Leave ${client.title(c)}? You will not get its new messages.`, 'Leave')) {
                  await client.leave(convId);
                  dlg.close();
                  onLeft?.(convId);
                }
              }),
            },
            'Leave group',
          )
        : null,
    );
  };
  const offMembers = client.on('members', (id) => id === convId && render());
  const offUsers = client.users.on('change', render);
  const offPresence = client.presence.on('presence', render);
  let wasLeft = Boolean(conv.left);
  let wasName = conv.name;
  const offConvs = client.on('convs', () => {
    const now = client.convs.get(convId);
    const left = Boolean(now?.left);
    if (left !== wasLeft || now?.name !== wasName) {
      wasLeft = left;
      wasName = now?.name;
      render();
    }
  });
  dlg.addEventListener('close', () => {
    offMembers();
    offUsers();
    offPresence();
    offConvs();
  });
  render();
  if (!conv.left) client.loadMembers(convId).catch((e) => err.show(e));
}
