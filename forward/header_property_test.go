package forward

import (
	"net/http"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestForwardCleanRequestHeaderProperty: for any Connection field lines (random
// lists, case, whitespace, empty elements) over any header, no field a
// Connection option named and no hop-by-hop field survives, every other
// field survives unchanged, and what the egress needs is there.
func TestForwardCleanRequestHeaderProperty(t *testing.T) {
	names := []string{"X-A", "X-B", "Keep-Alive", "Te", "Upgrade", "Cache-Control", "Accept", "X-Long-Name", "Close"}
	rapid.Check(t, func(t *rapid.T) {
		h := http.Header{}
		for _, n := range rapid.SliceOfN(rapid.SampledFrom(names), 0, 6).Draw(t, "fields") {
			h.Add(n, rapid.StringMatching(`[a-z0-9=;]{0,6}`).Draw(t, "value"))
		}
		named := map[string]bool{}
		for _, line := range rapid.SliceOfN(rapid.SliceOfN(rapid.SampledFrom(names), 0, 4), 0, 3).Draw(t, "connection") {
			var parts []string
			for _, n := range line {
				named[http.CanonicalHeaderKey(n)] = true
				if rapid.Bool().Draw(t, "lower") {
					n = strings.ToLower(n)
				}
				parts = append(parts, strings.Repeat(" ", rapid.IntRange(0, 2).Draw(t, "ows"))+n)
			}
			if rapid.Bool().Draw(t, "empty element") {
				parts = append(parts, "")
			}
			h.Add("Connection", strings.Join(parts, ","))
		}
		d := Dispatch{
			Version:  rapid.SampledFrom([]Version{VersionHTTP11, VersionHTTP2, VersionHTTP3, VersionALPN}).Draw(t, "version"),
			Trailers: rapid.Bool().Draw(t, "trailers"),
		}
		before := h.Clone()
		cleanRequestHeader(h, d)

		hop := map[string]bool{}
		for _, f := range hopByHop {
			hop[f] = true
		}
		for k, vv := range before {
			switch {
			case named[k] || hop[k]:
				if k == "Connection" || k == "Te" {
					continue // regenerated below when the egress needs them
				}
				if _, ok := h[k]; ok {
					t.Fatalf("%s survived: %v", k, h)
				}
			default:
				if strings.Join(h[k], "\x00") != strings.Join(vv, "\x00") {
					t.Fatalf("end-to-end field %s changed: %q → %q", k, vv, h[k])
				}
			}
		}
		wantTE := d.Trailers && d.Version != VersionALPN
		if got := h.Get("Te"); (got == "trailers") != wantTE || len(h["Te"]) > 1 {
			t.Fatalf("TE %q for %v trailers=%v", h["Te"], d.Version, d.Trailers)
		}
		wantConn := d.Trailers && d.Version == VersionHTTP11
		if got := h["Connection"]; wantConn != (len(got) == 1 && got[0] == "TE") || !wantConn && len(got) > 0 {
			t.Fatalf("Connection %q for %v trailers=%v", got, d.Version, d.Trailers)
		}
	})
}
