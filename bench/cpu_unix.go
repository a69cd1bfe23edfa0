//go:build unix

package bench

import "syscall"

// processCPUSeconds is the bench's own user+system CPU time, so a report
// shows how much of the machine the load generator took from the server.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
