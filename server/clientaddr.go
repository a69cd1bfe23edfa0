package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ParseTrustedProxies reads http.trusted_proxies: addresses or CIDR
// prefixes of the reverse proxies whose X-Forwarded-For is believed.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is neither an address nor a CIDR prefix", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ClientAddr is the address of the client that made r: the connection's
// peer, or, when the peer is a trusted proxy, the nearest hop of
// X-Forwarded-For that is not one. Walking from the right matters: a
// client may put anything in the header, and only the hops our proxies
// appended can be believed. Every place that needs "who is this" (login
// protection, registration limits, session records) asks here, so they
// agree.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	addr := peerAddr(r.RemoteAddr)
	if !isTrusted(addr, trusted) {
		return addr
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				// A hop we cannot read ends what can be believed; the
				// last good one (a trusted proxy) is the best we know.
				return addr
			}
			a = a.Unmap()
			addr = a
			if !isTrusted(a, trusted) {
				return a
			}
		}
	}
	return addr
}

// clientAddr is ClientAddr with the server's trusted proxies.
func (s *Server) clientAddr(r *http.Request) netip.Addr {
	return ClientAddr(r, s.cfg.TrustedProxies)
}

// clientAddress is clientAddr as sessions record it: the connection's
// remote address as given when it is not an IP address.
func (s *Server) clientAddress(r *http.Request) string {
	if a := s.clientAddr(r); a.IsValid() {
		return a.String()
	}
	return r.RemoteAddr
}

func peerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
