package retrycmp

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes rows as a plain table, one line per scenario and client:
// the copies the server received per run (min/max/total), the runs that
// duplicated a POST, whether the copies were byte-identical, the runs
// that resent an altered body, how the calls ended and the shortest and
// longest call (which show a client's backoff).
func Print(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tclient\truns\tcopies min/max/total\tdup POST\tcopies identical\taltered body\toutcome\tcall min/max")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s (%s)\t%s\t%d\t%d/%d/%d\t%s\t%s\t%d\t%s\t%s/%s\n",
			r.Scenario, r.Letter, r.Client, r.Runs,
			r.MinCopies, r.MaxCopies, r.TotalCopies,
			r.dupCell(), r.identicalCell(), r.Altered,
			outcomes(r.Outcomes), r.Fastest.Round(time.Millisecond), r.Slowest.Round(time.Millisecond))
	}
	return tw.Flush()
}

// Markdown writes rows as a Markdown table for the docs: one line per
// scenario, one column per client, each cell the copies per run, how the
// calls ended, and the duplicated POSTs and altered bodies if any.
func Markdown(w io.Writer, rows []Row) error {
	var clients []string
	var order []string
	cells := map[[2]string]string{}
	titles := map[string]string{}
	for _, r := range rows {
		if _, ok := titles[r.Scenario]; !ok {
			order = append(order, r.Scenario)
			titles[r.Scenario] = fmt.Sprintf("(%s) %s", r.Letter, r.Title)
		}
		key := [2]string{r.Scenario, r.Client}
		if _, ok := cells[key]; ok {
			continue
		}
		if !slices.Contains(clients, r.Client) {
			clients = append(clients, r.Client)
		}
		cells[key] = r.markdownCell()
	}
	var b strings.Builder
	b.WriteString("| scenario |")
	for _, c := range clients {
		fmt.Fprintf(&b, " %s |", c)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(clients)))
	b.WriteString("\n")
	for _, s := range order {
		fmt.Fprintf(&b, "| %s |", titles[s])
		for _, c := range clients {
			fmt.Fprintf(&b, " %s |", cells[[2]string{s, c}])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// markdownCell is r in one table cell: "2 · 200 · dup 30/30".
func (r Row) markdownCell() string {
	copies := fmt.Sprint(r.MinCopies)
	if r.MaxCopies != r.MinCopies {
		copies = fmt.Sprintf("%d–%d", r.MinCopies, r.MaxCopies)
	}
	parts := []string{copies, outcomes(r.Outcomes)}
	if r.SideEffect && r.Duplicated > 0 {
		parts = append(parts, fmt.Sprintf("**dup %d/%d**", r.Duplicated, r.Runs))
	}
	if r.Altered > 0 {
		parts = append(parts, fmt.Sprintf("**altered body %d/%d**", r.Altered, r.Runs))
	}
	return strings.Join(parts, " · ")
}

// dupCell is the runs that duplicated a POST, or "-" for other methods.
func (r Row) dupCell() string {
	if !r.SideEffect {
		return "-"
	}
	return fmt.Sprintf("%d/%d", r.Duplicated, r.Runs)
}

// identicalCell is how many duplicated runs had byte-identical copies, or
// "-" when no run had two copies.
func (r Row) identicalCell() string {
	if r.Duplicated == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", r.Identical, r.Duplicated)
}

// outcomes is a tally in one string: "200", or "200 ×28, error eof ×2".
func outcomes(ts []Tally) string {
	if len(ts) == 1 {
		return ts[0].Outcome
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s ×%d", t.Outcome, t.Runs)
	}
	return strings.Join(parts, ", ")
}
