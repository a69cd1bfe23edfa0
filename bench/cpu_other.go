//go:build !unix

package bench

func processCPUSeconds() float64 { return 0 }
