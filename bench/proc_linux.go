//go:build linux

package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProc reads a process's CPU time (user + system, all threads) from
// /proc/PID/stat and its write and read system calls from /proc/PID/io
// (syscw, syscr: write, writev, sendmsg, pwrite... all count). The io file
// is readable for processes of the same user.
func readProc(pid int) (procSample, error) {
	var p procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return p, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return p, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return p, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	p.cpuSec = float64(ut+st) / clockTicks
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return p, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, val, ok := bytes.Cut(line, []byte(": "))
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "syscw":
			p.writes = n
		case "syscr":
			p.reads = n
		}
	}
	p.ok = true
	return p, nil
}

// procRSS reads a process's resident set in bytes (VmRSS of
// /proc/PID/status): what process_resident_memory_bytes reports, without
// asking the server anything.
func procRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseFloat(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}
