// Package floor holds benchmarks of what the server's hot path is made of,
// without the server: a bare batched SQLite insert and a bare WebSocket
// write on this machine. They are the physical floor under the CPU that
// `imserver bench --scenario interactive` measures per message (issue 19);
// see BENCHMARKS.md. The package has no code of its own.
package floor
