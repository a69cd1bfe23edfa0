package bench

import "testing"

func TestParseReq(t *testing.T) {
	s := &session{cmidPrefix: "12-"}
	for in, want := range map[string]int{"12-1": 1, "12-345": 345, "12-0": -1, "12-01": -1, "12-": -1, "12--1": -1,
		"1-5": -1, "112-5": -1, "12-5x": -1, "sync:0": -1, "": -1} {
		n, ok := s.parseReq([]byte(in))
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("parseReq(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "7": 7, "-3": -3, "9223372036854775799": 9223372036854775799} {
		if n, ok := parseInt([]byte(in)); !ok || n != want {
			t.Errorf("parseInt(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "-", "01", "1.5", "1e3", "+1", "99999999999999999999", "1-"} {
		if n, ok := parseInt([]byte(in)); ok {
			t.Errorf("parseInt(%q) = %d, ok", in, n)
		}
	}
}
