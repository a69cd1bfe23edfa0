package populate

import (
	"fmt"
	"io"
	"time"
)

// procIO is the process's /proc/self/io counters (Linux; zero elsewhere):
// syscr and rchar count the page reads that miss SQLite's page cache,
// syscw and wchar the WAL frames and the checkpoints' copies.
type procIO struct {
	syscr, rchar, syscw, wchar int64
	cpu                        time.Duration // user and system CPU time
}

// reportCost writes what n appends cost the store in commits, WAL pages
// and read and write calls: the figures that tell where the rate went
// when it falls with the database's size.
func reportCost(w io.Writer, n, commits, walPages int64, a, b procIO) {
	if w == nil || n <= 0 {
		return
	}
	per := func(x int64) float64 { return float64(x) / float64(n) }
	fmt.Fprintf(w, "populate: cost of %d appends: %.1f CPU µs/msg, %d commits (%.0f msgs/commit), %.3f WAL pages/msg (%.0f per commit); per msg: %.2f reads (%.0f bytes), %.2f writes (%.0f bytes)\n",
		n, float64((b.cpu-a.cpu).Microseconds())/float64(n), commits, float64(n)/float64(max(commits, 1)), per(walPages), float64(walPages)/float64(max(commits, 1)),
		per(b.syscr-a.syscr), per(b.rchar-a.rchar), per(b.syscw-a.syscw), per(b.wchar-a.wchar))
}
