//go:build !linux

package populate

func readProcIO() procIO { return procIO{} }
