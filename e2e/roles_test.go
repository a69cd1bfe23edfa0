package e2e

import "testing"

// The owner of a group makes a member an admin, who can then remove
// members; then hands the group over, and is an admin after.
func TestGroupRoles(t *testing.T) {
	srv := startServer(t, "")
	alice := newPerson(t, srv, "alice")
	alice.register("alice", "Alice Archer")
	bob := newPerson(t, srv, "bob")
	bob.register("bob", "Bob Baker")
	carol := newPerson(t, srv, "carol")
	carol.register("carol", "Carol Chen")

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
