//go:build !unix

package main

// lockDatabase does nothing where flock is missing: the documentation's
// rule (several processes on one file only with Redis) is then the
// operator's to keep.
func lockDatabase(path string, shared bool) (func(), error) { return func() {}, nil }
