package interop

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Columns are the table's columns, in order; docs/interop.md explains
// them.
var Columns = []string{"row", "client", "runs", "reqs", "delivered", "errors", "copies", "max", "lost", "dup POST",
	"conns", "resends", "crossed", "h3", "h3 srv", "wall/run"}

// Cells returns the result's row of the table, one cell per column: "-"
// where the client or the server cannot tell.
func (r Result) Cells() []string {
	known := func(n int) string {
		if n < 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	return []string{r.Row, r.Client, fmt.Sprint(r.Runs), fmt.Sprint(r.Requests), fmt.Sprint(r.Delivered), fmt.Sprint(r.Errors),
		fmt.Sprint(r.Copies), fmt.Sprint(r.MaxCopies), fmt.Sprint(r.Lost), fmt.Sprint(r.DuplicatePOST),
		known(r.Conns), known(r.Resends), known(r.Crossed), fmt.Sprint(r.H3), known(r.ServerH3), r.Wall.Round(time.Millisecond).String()}
}

// WriteMarkdown writes the summary as docs/interop.md shows it: for each
// server run, its version and a Markdown table of its rows, each row
// with what it is meant to show; then the failures. commit names the
// tree that was measured.
func WriteMarkdown(w io.Writer, sum Summary, commit string) {
	fmt.Fprintf(w, "Measured on commit %s: %d replaysafe attempt traces checked, %d failures, %s.\n",
		commit, sum.Traces, len(sum.Failures), sum.Wall.Round(time.Second))
	shows := map[string]Point{}
	for _, r := range Rows() {
		shows[r.ID] = r.Shows
	}
	for _, server := range Servers {
		v, ok := sum.Versions[server]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "\n%s (`%s`)\n\n", server, v)
		fmt.Fprintf(w, "| %s | shows |\n|%s\n", strings.Join(Columns, " | "), strings.Repeat("---|", len(Columns)+1))
		for _, r := range sum.Results {
			if serverOf(r.Row) != server {
				continue
			}
			fmt.Fprintf(w, "| %s | %v |\n", strings.Join(r.Cells(), " | "), shows[r.Row])
		}
	}
	for _, f := range sum.Failures {
		fmt.Fprintf(w, "\nFAIL %s\n", f)
	}
}

// serverOf returns the server a row ID belongs to.
func serverOf(row string) string {
	s, _, _ := strings.Cut(row, "-")
	return s
}
