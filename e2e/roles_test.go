package e2e

import "testing"

// The owner of a group makes a member an admin, who can then remove
// members; then hands the group over, and is an admin after.
func TestGroupRoles(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	carol := newUser(t, srv, "carol", "Carol Chen")

	alice.newGroup("Crew", "bob")
	alice.click("#details-btn")
	alice.waitFor("the member list", `document.querySelectorAll('#member-list .member').length === 2`)
	alice.pickUser("#add-search", "carol")
	alice.waitFor("carol in the member list", `document.querySelectorAll('#member-list .member').length === 3`)
	alice.click("#details-dialog .close")
	alice.send("roles today")

	// Bob, a member, has no remove buttons and no role buttons.
	bob.openConv("Crew")
	bob.waitMessage("roles today")
	bob.click("#details-btn")
	bob.waitFor("the member list", `document.querySelectorAll('#member-list .member').length === 3`)
	if n := bob.evalInt(`document.querySelectorAll('#member-list .kick-btn, #member-list .role-btn, #member-list .owner-btn').length`); n != 0 {
		bob.fail("a member sees %d buttons to manage others", n)
	}

	alice.click("#details-btn")
	alice.waitFor("the member list", `document.querySelectorAll('#member-list .member').length === 3`)
	alice.click(`#member-list .role-btn[aria-label="Make Bob Baker an admin"]`)
	alice.waitFor("bob listed as admin", `document.querySelector('#member-list .role-btn[aria-label="Remove Bob Baker as admin"]') !== null`)

	// Bob's dialog, open all along, follows: he is an admin and may
	// remove Carol.
	bob.waitFor("bob's own role", `[...document.querySelectorAll('#member-list .role')].some(r => r.textContent === 'admin · you')`)
	bob.waitFor("a remove button for carol", `document.querySelector('#member-list .kick-btn[aria-label="Remove Carol Chen"]') !== null`)
	if n := bob.evalInt(`document.querySelectorAll('#member-list .role-btn, #member-list .owner-btn').length`); n != 0 {
		bob.fail("an admin sees %d role buttons", n)
	}
	bob.click("#details-dialog .close")

	// Alice hands the group to Carol.
	alice.click(`#member-list .owner-btn[aria-label="Make Carol Chen the owner"]`)
	alice.click("#confirm-ok")
	alice.waitFor("alice an admin", `[...document.querySelectorAll('#member-list .role')].some(r => r.textContent === 'admin · you')`)
	alice.waitFor("no role buttons left for alice", `document.querySelectorAll('#member-list .role-btn, #member-list .owner-btn').length === 0`)
	alice.click("#details-dialog .close")

	carol.openConv("Crew")
	carol.click("#details-btn")
	carol.waitFor("carol the owner", `[...document.querySelectorAll('#member-list .role')].some(r => r.textContent === 'owner · you')`)
	carol.waitFor("carol's role buttons", `document.querySelectorAll('#member-list .role-btn').length === 2`)
	carol.saveScreenshot("roles.png")
}

// The owner renames a group from its details; a member's list and open
// conversation follow at once; a plain member has no rename form.
func TestRenameGroup(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")

	alice.newGroup("Crew", "bob")
	alice.send("before the new name")
	bob.openConv("Crew")
	bob.waitMessage("before the new name")
	bob.click("#details-btn")
	bob.waitFor("the member list", `document.querySelectorAll('#member-list .member').length === 2`)
	if n := bob.evalInt(`document.querySelectorAll('#rename-form:not([hidden])').length`); n != 0 {
		bob.fail("a plain member sees the rename form")
	}
	bob.click("#details-dialog .close")

	alice.click("#details-btn")
	alice.waitFor("the rename form", `!document.querySelector('#rename-form').hidden`)
	alice.eval(`document.querySelector('#rename-input').value = ''`, nil)
	alice.typeInto("#rename-input", "Release crew")
	alice.click("#rename-btn")
	alice.waitFor("the dialog's new title", `document.querySelector('#details-dialog-title').textContent === 'Release crew'`)
	alice.saveScreenshot("rename.png")
	alice.click("#details-dialog .close")
	alice.waitConv("Release crew")

	// Bob's page hears of it by its conversation frame.
	bob.waitConv("Release crew")
	bob.waitFor("the new name over bob's open conversation", `document.querySelector('#chat-title')?.textContent === 'Release crew'`)
}
