package bench

// procSample is one reading of the server process's counters.
type procSample struct {
	cpuSec float64 // user + system CPU, all threads
	writes int64   // write system calls (syscw)
	reads  int64   // read system calls (syscr)
	ok     bool
}
