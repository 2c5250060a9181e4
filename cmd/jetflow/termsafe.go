package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// termSafe writes to w what the CLI prints with every control character
// but newline and tab made visible: task IDs, headers, payloads, errors
// and dead-letter reasons come from whoever could publish a task, and an
// escape sequence printed raw could retitle the terminal, clear it, or
// overwrite a line with something else (a carriage return). C0 controls,
// DEL and bytes that are not UTF-8 are written as \xNN; C1 controls
// (U+0080 to U+009F, which some terminals read as ESC sequences) as
// \u00NN, which keeps JSON output valid and equal in meaning. A rune
// split between two writes is held until the next.
type termSafe struct {
	w       io.Writer
	pending []byte
	buf     []byte
}

func (t *termSafe) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.pending) > 0 {
		p = append(t.pending, p...)
		t.pending = nil
	}
	out := t.buf[:0]
	for len(p) > 0 {
		c := p[0]
		switch {
		case c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f):
			out = append(out, c)
			p = p[1:]
			continue
		case c < 0x80:
			out = fmt.Appendf(out, `\x%02x`, c)
			p = p[1:]
			continue
		}
		if !utf8.FullRune(p) {
			t.pending = append([]byte(nil), p...)
			break
		}
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, c)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[:size]...)
		}
		p = p[size:]
	}
	t.buf = out
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// flush writes a rune left incomplete by the last write, escaped.
func (t *termSafe) flush() {
	for _, c := range t.pending {
		fmt.Fprintf(t.w, `\x%02x`, c)
	}
	t.pending = nil
}
