package populate

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// procIO is the process's /proc/self/io counters (Linux; zero elsewhere):
// syscr and rchar count the page reads that miss SQLite's page cache,
// syscw and wchar the WAL frames and the checkpoints' copies.
type procIO struct{ syscr, rchar, syscw, wchar int64 }

func readProcIO() procIO {
	var p procIO
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return p
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			p.syscr = n
		case "rchar":
			p.rchar = n
		case "syscw":
			p.syscw = n
		case "wchar":
			p.wchar = n
		}
	}
	return p
}

// reportCost writes what n appends cost the store in commits, WAL pages
// and read and write calls: the figures that tell where the rate went
// when it falls with the database's size.
func reportCost(w io.Writer, n, commits, walPages int64, a, b procIO) {
	if w == nil || n <= 0 {
		return
	}
	per := func(x int64) float64 { return float64(x) / float64(n) }
	fmt.Fprintf(w, "populate: cost of %d appends: %d commits (%.0f msgs/commit), %.3f WAL pages/msg (%.0f per commit); per msg: %.2f reads (%.0f bytes), %.2f writes (%.0f bytes)\n",
		n, commits, float64(n)/float64(max(commits, 1)), per(walPages), float64(walPages)/float64(max(commits, 1)),
		per(b.syscr-a.syscr), per(b.rchar-a.rchar), per(b.syscw-a.syscw), per(b.wchar-a.wchar))
}
