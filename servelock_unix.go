//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockDatabase marks a SQLite database file as served by this process
// until it exits: an advisory lock (flock, which on Linux and the BSDs is
// independent of the byte-range locks SQLite itself takes), exclusive for
// a server alone, shared for servers that coordinate through Redis. Two
// servers on one file without Redis would hand out the same seqs and
// answer each other's sends with errors; the second is refused at start
// instead, saying why.
func lockDatabase(path string, shared bool) (release func(), err error) {
	// A new database's file is made here, empty (SQLite takes an empty
	// file for a new database), so that it is locked before anyone
	// migrates it.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if shared {
				return nil, fmt.Errorf("%s is served by another imserver without Redis: several processes may share one database file only when all of them have redis configured", path)
			}
			return nil, fmt.Errorf("%s is served by another imserver: several processes may share one database file only with redis configured (in all of them)", path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
