//go:build !linux

package bench

import "errors"

func readProc(pid int) (procSample, error) {
	return procSample{}, errors.New("reading another process's CPU time and system calls needs Linux's /proc")
}
