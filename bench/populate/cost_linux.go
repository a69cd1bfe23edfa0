package populate

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func readProcIO() procIO {
	var p procIO
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		p.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
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
