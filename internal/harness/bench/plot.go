package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// plotSeries are the ratios the plot draws for each pair, in bar order.
var plotSeries = []struct {
	label, color string
	unit         func(Pair) string
}{
	{"time (ns/op) or bytes", "#4e79a7", func(p Pair) string { return primaryUnit(p.Replaysafe) }},
	{"p99 latency", "#f28e2b", timedOnly("p99-ns")},
	{"allocs/op", "#59a14f", timedOnly("allocs/op")},
}

// timedOnly returns unit for a timed pair and "" (no bar) for a memory
// pair, whose allocations are its setup's.
func timedOnly(unit string) func(Pair) string {
	return func(p Pair) string {
		if primaryUnit(p.Replaysafe) != "ns/op" {
			return ""
		}
		return unit
	}
}

// plotMax is where the ratio axis ends; longer bars are cut and labeled.
const plotMax = 3.0

// WriteSVG draws the pairs' ratios as a horizontal grouped bar chart:
// one group per pair, one bar per series, a line at 1.0 (at least as
// good as the peer to its right).
func (o *Output) WriteSVG(w io.Writer, title string) error {
	pairs := o.Pairs()
	const (
		labelW = 330.0
		plotW  = 460.0
		barH   = 7.0
		gap    = 9.0
		top    = 58.0
	)
	groupH := float64(len(plotSeries))*barH + gap
	height := top + float64(len(pairs))*groupH + 40
	width := labelW + plotW + 60
	x := func(r float64) float64 { return labelW + plotW*math.Min(r, plotMax)/plotMax }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	legendX := 10.0
	for _, s := range plotSeries {
		fmt.Fprintf(&b, `<rect x="%.0f" y="28" width="10" height="10" fill="%s"/><text x="%.0f" y="37">%s</text>`+"\n", legendX, s.color, legendX+14, html.EscapeString(s.label))
		legendX += 30 + 7*float64(len(s.label))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="37">ratio = peer ÷ replaysafe; ≥ 1 is at least as good</text>`+"\n", legendX)
	for t := 0.0; t <= plotMax; t += 0.5 {
		stroke := "#ddd"
		if t == 1 {
			stroke = "#333"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s"/>`+"\n", x(t), top-6, x(t), height-30, stroke)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.1f</text>`+"\n", x(t), height-16, t)
	}
	for i, p := range pairs {
		y := top + float64(i)*groupH
		label := p.Group + " vs " + p.Peer
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", labelW-8, y+groupH/2, html.EscapeString(label))
		for j, s := range plotSeries {
			r, ok := p.Ratios[s.unit(p)]
			if !ok {
				continue
			}
			by := y + float64(j)*barH
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", labelW, by, x(r)-labelW, barH-1, s.color)
			text := fmt.Sprintf("%.2f", r)
			if math.IsInf(r, 1) {
				text = "inf"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="8">%s</text>`+"\n", x(r)+3, by+barH-1, text)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
