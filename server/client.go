package server

import (
	"net"
	"net/http"
)

// clientAddress is the address a request comes from, as sessions record
// it: the connection's remote address. The one place to change when
// requests arrive through a proxy (X-Forwarded-For from trusted hops).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
