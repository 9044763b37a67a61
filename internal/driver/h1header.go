package driver

import "time"

// DefaultHeaderSectionTimeout bounds each HTTP/1.1 response header
// section from its first byte to its end: a server that dribbles its
// status line or header fields fails the attempt as a timeout (RS06,
// never resent) with an *h1.HeaderTimeoutError. Each informational (1xx)
// response is a section of its own, so a server may take its time
// between an interim response and the final one. An honest server sends
// a header section in one piece; the bound leaves room for a large one
// (64 KiB) over a slow link and for a few TCP retransmissions
// (spec/choices.md, choice 40).
const DefaultHeaderSectionTimeout = 20 * time.Second
