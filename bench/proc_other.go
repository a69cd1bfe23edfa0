//go:build !linux

package bench

import "errors"

func readProc(pid int) (procSample, error) {
	return procSample{}, errors.New("reading another process's CPU time and system calls needs Linux's /proc")
}

func procRSS(pid int) (float64, error) {
	return 0, errors.New("reading another process's memory needs Linux's /proc")
}
