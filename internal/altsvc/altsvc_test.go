package altsvc_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/altsvc"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		values []string
		port   uint16
		maxAge time.Duration
		result altsvc.Result
	}{
		{"same host", []string{`h3=":4433"`}, 4433, altsvc.DefaultMaxAge, altsvc.Advertised},
		{"max age", []string{`h3=":443"; ma=60`}, 443, time.Minute, altsvc.Advertised},
		{"quoted max age and persist", []string{`h3=":443"; persist=1; ma="120"`}, 443, 2 * time.Minute, altsvc.Advertised},
		{"first h3 of a list", []string{`h2=":443", h3-29=":8443", h3=":9443"; ma=5, h3=":1"`}, 9443, 5 * time.Second, altsvc.Advertised},
		{"named own host", []string{`h3="Example.com:8443"`}, 8443, altsvc.DefaultMaxAge, altsvc.Advertised},
		{"across field lines", []string{`h2=":443"`, `h3=":7443"`}, 7443, altsvc.DefaultMaxAge, altsvc.Advertised},
		{"other host ignored", []string{`h3="cdn.example.net:443"`}, 0, 0, altsvc.Silent},
		{"comma inside quotes", []string{`h3="a,b:1", h3=":2"`}, 2, altsvc.DefaultMaxAge, altsvc.Advertised},
		{"clear", []string{`clear`}, 0, 0, altsvc.Cleared},
		{"port zero", []string{`h3=":0"`}, 0, 0, altsvc.Silent},
		{"unquoted authority", []string{`h3=:443`}, 0, 0, altsvc.Silent},
		{"no port", []string{`h3="example.com"`}, 0, 0, altsvc.Silent},
		{"empty IP literal", []string{`h3="[]:443"`}, 0, 0, altsvc.Silent},
		{"garbage", []string{`;;,,=`}, 0, 0, altsvc.Silent},
		{"none", nil, 0, 0, altsvc.Silent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			alt, res := altsvc.Parse(c.values, "example.com", now)
			want := altsvc.H3{}
			if c.result == altsvc.Advertised {
				want = altsvc.H3{Port: c.port, Expires: now.Add(c.maxAge)}
			}
			if res != c.result || alt != want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v, %v", c.values, alt, res, want, c.result)
			}
		})
	}
}

func ExampleParse() {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	alt, res := altsvc.Parse([]string{`h2=":443", h3=":8443"; ma=3600`}, "example.com", now)
	fmt.Println(res == altsvc.Advertised, alt.Port, alt.Expires.Format(time.TimeOnly))
	_, res = altsvc.Parse([]string{`h3="cdn.example.net:443"`}, "example.com", now)
	fmt.Println(res == altsvc.Silent)
	// Output:
	// true 8443 13:00:00
	// true
}

// TestParseHugeFieldAllocatesNothing: a server controls the Alt-Svc
// field, up to the response header limit (10 MiB by default). Parse
// walks it in place: a 9 MiB field of commas, or of semicolons after an
// h3 alternative on another host, allocates less than 64 KiB in all
// (before: 933 MiB and 789 MiB, a string header per empty item), and an
// h3 alternative after 9 MiB of commas is still found.
func TestParseHugeFieldAllocatesNothing(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	commas := strings.Repeat(",", 9<<20)
	for _, c := range []struct {
		name, value string
		want        altsvc.Result
	}{
		{"commas", commas, altsvc.Silent},
		{"semicolons", `h3="other:443"` + strings.Repeat(";", 9<<20), altsvc.Silent},
		{"h3 after commas", commas + `h3=":8443"; ma=60`, altsvc.Advertised},
	} {
		var res altsvc.Result
		var alt altsvc.H3
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		alt, res = altsvc.Parse([]string{c.value}, "example.com", now)
		runtime.ReadMemStats(&after)
		if res != c.want || res == altsvc.Advertised && (alt.Port != 8443 || !alt.Expires.Equal(now.Add(time.Minute))) {
			t.Errorf("%s: %v %+v, want %v", c.name, res, alt, c.want)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: %d bytes allocated for a %d-byte field", c.name, n, len(c.value))
		}
	}
}
