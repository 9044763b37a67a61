package fuzz

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/internal/harness/campaign"
)

var libFuzzerSeedDir = flag.String("libfuzzer-seeds", "", "write every target's seeds, converted for a go-118-fuzz-build libFuzzer binary, to this directory, one subdirectory a target")

// libFuzzerSeed is one seed of a target, converted for libFuzzer.
type libFuzzerSeed struct {
	name  string
	input []byte
}

// libFuzzerSeeds converts a target's seeds for libFuzzer: every file under
// testdata/fuzz/<target>/ (the generated seeds and the inputs go test
// -fuzz saved), then the target's f.Add arguments, named add-1, add-2 and
// so on.
func libFuzzerSeeds(c corpus) ([]libFuzzerSeed, error) {
	var out []libFuzzerSeed
	dir := filepath.Join("testdata", "fuzz", c.target)
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		args, err := ParseCorpusFile(b)
		if err != nil {
			return nil, &os.PathError{Op: "parse", Path: path, Err: err}
		}
		in, err := LibFuzzerInput(args...)
		if err != nil {
			return nil, &os.PathError{Op: "convert", Path: path, Err: err}
		}
		out = append(out, libFuzzerSeed{e.Name(), in})
	}
	for i, args := range c.added {
		in, err := LibFuzzerInput(args...)
		if err != nil {
			return nil, &os.PathError{Op: "convert", Path: c.target + " f.Add #" + strconv.Itoa(i+1), Err: err}
		}
		out = append(out, libFuzzerSeed{"add-" + strconv.Itoa(i+1), in})
	}
	return out, nil
}

// TestLibFuzzerSeeds converts every target's seeds for its libFuzzer
// build and checks that each decodes, as go-118-fuzz-build's testing.F
// decodes it, to the seed's values. With -libfuzzer-seeds DIR it writes
// them to DIR/<target>/, which .clusterfuzzlite/build.sh zips into each
// target's seed corpus.
func TestLibFuzzerSeeds(t *testing.T) {
	var registered []string
	for _, c := range corpora {
		registered = append(registered, c.target)
	}
	slices.Sort(registered)
	want := slices.Sorted(slices.Values(campaign.Targets()))
	if !slices.Equal(registered, want) {
		t.Fatalf("targets with a registered corpus: %v; the fuzz targets: %v", registered, want)
	}
	total := 0
	for _, c := range corpora {
		seeds, err := libFuzzerSeeds(c)
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		if len(seeds) == 0 {
			t.Errorf("%s: no seed", c.target)
		}
		total += len(seeds)
		if *libFuzzerSeedDir == "" {
			continue
		}
		dir := filepath.Join(*libFuzzerSeedDir, c.target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			if err := os.WriteFile(filepath.Join(dir, s.name), s.input, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d seeds of %d targets converted", total, len(corpora))
	if *libFuzzerSeedDir != "" {
		t.Logf("written under %s", *libFuzzerSeedDir)
	}
}

// The encoding, byte by byte, of go-fuzz-headers' consumer as
// go-118-fuzz-build's testing.F uses it.
func TestLibFuzzerInputBytes(t *testing.T) {
	for _, c := range []struct {
		args []any
		want []byte
	}{
		{[]any{[]byte("ab")}, []byte{0, 0, 0, 2, 'a', 'b'}},
		{[]any{"ab"}, []byte{0, 0, 0, 2, 'a', 'b'}},
		// A uint16 is two bytes and an order byte: odd is big-endian.
		{[]any{[]byte("ab"), uint16(0x0102)}, []byte{0, 0, 0, 2, 'a', 'b', 1, 2, 1}},
		// An empty []byte before others: its length is twice what is
		// left, which the consumer takes modulo what is left.
		{[]any{[]byte{}, uint16(7)}, []byte{0, 0, 0, 6, 0, 7, 1}},
		// A bool is one byte, even for true.
		{[]any{"", "h", true}, []byte{0, 0, 0, 0, 0, 0, 0, 1, 'h', 0}},
		{[]any{false}, []byte{1}},
		{[]any{int32(-1), uint64(2), int8(-2)}, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0xfe}},
	} {
		got, err := LibFuzzerInput(c.args...)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("LibFuzzerInput(%#v) = % x, %v; want % x", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]any{
		{[]byte{}},        // an empty last []byte: nothing left to read
		{"x", ""},         // an empty last string
		{float64(1)},      // not decoded
		{[]int{1}, "abc"}, // not decoded
	} {
		if got, err := LibFuzzerInput(args...); err == nil {
			t.Errorf("LibFuzzerInput(%#v) = % x, want an error", args, got)
		}
	}
}

// Decoding what LibFuzzerInput wrote gives the values back for every
// shape of argument list the targets use, over a sweep of lengths.
func TestLibFuzzerInputRoundTrip(t *testing.T) {
	for n := range 70 {
		b := bytes.Repeat([]byte{byte(n)}, n)
		s := strings.Repeat("s", n)
		for _, args := range [][]any{
			{b}, {s}, {b, uint16(n * 977)}, {s, "x", n%2 == 0}, {"", s, true},
			{b, b, int64(-n)}, {uint(n), b},
		} {
			if emptyLast(args) {
				continue // an empty last value has no input
			}
			in, err := LibFuzzerInput(args...)
			if err != nil {
				t.Fatalf("%#v: %v", args, err)
			}
			got, err := libFuzzerArgs(in, argTypes(args))
			if err != nil || !reflect.DeepEqual(normalize(got), normalize(args)) {
				t.Fatalf("%#v: decoded %#v, %v", args, got, err)
			}
		}
	}
}

func TestParseCorpusFile(t *testing.T) {
	got, err := ParseCorpusFile([]byte("go test fuzz v1\n[]byte(\"a\\x00b\")\nstring(\"\\u00fc\")\nbool(true)\n" +
		"uint16(65535)\nint(-3)\nint8(-128)\nuint64(0x10)\nbyte('\\x01')\nrune('\u00fc')\n"))
	want := []any{[]byte("a\x00b"), "\u00fc", true, uint16(65535), -3, int8(-128), uint64(16), byte(1), 'ü'}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseCorpusFile = %#v, %v; want %#v", got, err, want)
	}
	for _, bad := range []string{
		"", "go test fuzz v2\nbool(true)\n", "go test fuzz v1\n", "go test fuzz v1\nuint8(256)\n",
		"go test fuzz v1\nfloat64(1.5)\n", "go test fuzz v1\nbool(1)\n", "go test fuzz v1\nstring(x)\n",
		"go test fuzz v1\n\"bare\"\n", "go test fuzz v1\nbyte('\\u0100')\n", "go test fuzz v1\n[]int(\"a\")\n",
	} {
		if v, err := ParseCorpusFile([]byte(bad)); err == nil {
			t.Errorf("ParseCorpusFile(%q) = %#v, want an error", bad, v)
		}
	}
}

// emptyLast reports whether the last argument is an empty string or []byte.
func emptyLast(args []any) bool {
	switch v := args[len(args)-1].(type) {
	case string:
		return v == ""
	case []byte:
		return len(v) == 0
	}
	return false
}
