package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Display shows what a command is doing, one line per item (an image, a Deployment). On a
// terminal the lines are redrawn in place as they change, each cut to the terminal's width (a
// line that wraps would break the redraw); anywhere else every change is one plain line,
// "item: status", which is what a CI log wants. Both commands show their progress with it.
type Display struct {
	mu     sync.Mutex
	w      io.Writer
	live   bool
	width  int
	keys   []string
	status map[string]string
	drawn  int
}

// NewDisplay shows on w, live when w is a terminal.
func NewDisplay(w *os.File) *Display {
	return &Display{w: w, live: IsTerminal(w), width: columns(), status: map[string]string{}}
}

// columns is the terminal's width as the shell exports it, else 100.
func columns() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 20 {
		return n
	}
	return 100
}

// NewPlainDisplay shows plain lines on w.
func NewPlainDisplay(w io.Writer) *Display {
	return &Display{w: w, status: map[string]string{}}
}

// Set changes an item's status.
func (d *Display) Set(key, status string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, seen := d.status[key]; !seen {
		d.keys = append(d.keys, key)
	}
	if d.status[key] == status {
		return
	}
	d.status[key] = status
	if !d.live {
		fmt.Fprintf(d.w, "%s: %s\n", key, status)
		return
	}
	d.redraw()
}

// Print writes a line above the live view (or a plain line).
func (d *Display) Print(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.live {
		fmt.Fprintln(d.w, line)
		return
	}
	d.clear()
	fmt.Fprintln(d.w, line)
	d.draw()
}

func (d *Display) redraw() {
	d.clear()
	d.draw()
}

func (d *Display) clear() {
	if d.drawn > 0 {
		fmt.Fprintf(d.w, "\x1b[%dA\x1b[J", d.drawn) // up N lines, clear to the end
	}
	d.drawn = 0
}

func (d *Display) draw() {
	width := 0
	for _, k := range d.keys {
		width = max(width, len(k))
	}
	var b strings.Builder
	for _, k := range d.keys {
		b.WriteString(fit(fmt.Sprintf("%-*s  %s", width, k, d.status[k]), d.width))
		b.WriteByte('\n')
	}
	io.WriteString(d.w, b.String())
	d.drawn = len(d.keys)
}

// fit cuts a line to width runes; 0 is no limit.
func fit(line string, width int) string {
	if r := []rune(line); width > 0 && len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return line
}
