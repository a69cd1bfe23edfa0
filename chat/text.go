package chat

import (
	"strings"
	"unicode/utf8"
)

// storable reports whether s is text every store can hold: UTF-8 with no
// NUL character. PostgreSQL's text type cannot hold U+0000, so SQLite
// would otherwise keep what a PostgreSQL node refuses, and a database
// could not move from one to the other. Text a client stores is refused
// with bad_request when it is not storable; an id or a name looked up
// that is not storable names nothing.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// errNoSuch answers a look-up of an id or a name that is not storable:
// nothing can have it, and the store is not asked (PostgreSQL would
// refuse the query itself).
var errNoSuch = Errorf(ENotFound, "not found")
