package proxy

import (
	"strconv"
	"unicode/utf8"
)

// MaxPeerText bounds the bytes of text taken from a proxy (a reason
// phrase, Proxy-Authenticate challenges) that an error message quotes.
// The error's fields keep the whole values; only the message is cut.
const MaxPeerText = 256

// peerText returns s, or its first MaxPeerText bytes (cut at a UTF-8
// boundary) followed by how many bytes were left out.
func peerText(s string) string { return CutText(s, MaxPeerText) }

// CutText returns s, or its first max bytes (cut at a UTF-8 boundary)
// followed by how many bytes were left out: how an error message quotes
// text a peer controls.
func CutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "... (" + thousands(len(s)-n) + " bytes cut)"
}

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
