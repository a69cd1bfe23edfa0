// Package bench is `imserver bench`: a load generator that drives an imserver
// over the public protocol only (../shared/PROTOCOL.md: HTTP, the WebSocket,
// and GET /metrics for memory) and reports what users ask of a chat server.
//
// What the figures mean:
//   - durable sends/s: `sent` answers (each one a durable commit) divided by
//     the time from the first send to the last `sent`.
//   - deliveries/s: messages received in live `msg` and `batch` frames
//     divided by the time from the first send to the last live delivery.
//   - latency: send → live delivery, measured by the bench's own clock (the
//     send time travels in the body); "sent" latency is send → `sent`.
//     Flat out (--rate 0) these are queueing times; use --rate for latency.
//   - catch-up: the offline member's GET .../messages?after_seq=… pages, from
//     the first request to the page that says completed.
//   - memory/session: the change in process_resident_memory_bytes, and in
//     heap + stack in use, between before and after opening the sessions,
//     each read once further GC cycles no longer move them (see
//     settledMemory): the server as its collector normally leaves it, GC
//     headroom included in RSS.
//
// The growth scenario (growth.go) is the exception to "public protocol
// only": it makes its databases with `imserver populate` (bench/populate,
// the store's own write path) and times `populate --more` on them, then
// runs the other scenarios against a server on each.
//
// The correctness line is kept per receiving session (one per user unless
// --sessions exceeds --users) against a ledger of what the server confirmed
// with `sent`: every confirmed message of a session's conversations, except
// its own sends, is expected once. lost = expected and never received, live
// or by pull; duplicated = a seq delivered again on the live path of one
// connection; order violations = a live seq below one already delivered on
// that connection, or a pull page not ascending; unexpected = a seq nobody
// was told was stored, or a session's own message echoed to it live.
// After a `resync` the session pulls with `sync` frames, as PROTOCOL.md asks
// of a client, and overlap with live frames is not a duplicate.
//
// The bench usually shares the machine with the server, so its own cost per
// message ("cpu s server/bench") is kept low: frames are decoded without
// allocating (decode.go), and sends that are ready together leave in one
// write syscall (wsconn.go). Neither changes the bytes on the wire.
package bench
