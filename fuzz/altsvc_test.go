package fuzz

import (
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/altsvc"
)

// FuzzAltSvc checks that no Alt-Svc field value makes altsvc.Parse panic,
// that an advertisement it returns is usable (a port, a lifetime from
// now), and that for a host no value can name in full only host-less
// alternatives, which need `":` in the value, are taken.
func FuzzAltSvc(f *testing.F) {
	for _, seed := range altSvcSeeds {
		f.Add(seed)
	}
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		alt, res := altsvc.Parse([]string{v}, "example.com", now)
		switch res {
		case altsvc.Advertised:
			if alt.Port == 0 || alt.Expires.Before(now) {
				t.Fatalf("%q: unusable alternative %+v", v, alt)
			}
		case altsvc.Silent, altsvc.Cleared:
			if alt != (altsvc.H3{}) {
				t.Fatalf("%q: %v with an alternative %+v", v, res, alt)
			}
		default:
			t.Fatalf("%q: result %d", v, res)
		}
		const host = "host.that.no-value.names\x00"
		if _, res := altsvc.Parse([]string{v}, host, now); res == altsvc.Advertised && !strings.Contains(v, `":`) && !strings.Contains(v, host) {
			t.Fatalf("%q: an alternative on another host was taken", v)
		}
	})
}

// altSvcSeeds are the field values the target passes to f.Add.
var altSvcSeeds = []string{
	`h3=":443"; ma=3600`, `clear`, `h2=":443", h3="example.com:8443"; persist=1`,
	`h3="other.example:443"`, `h3="\"quoted\":1"`, `h3=":443"; ma="x"`, `,,;;="`,
}

func init() {
	c := corpus{target: "FuzzAltSvc"}
	for _, v := range altSvcSeeds {
		c.added = append(c.added, []any{v})
	}
	corpora = append(corpora, c)
}
