package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// safe makes text that came from events, errors or the database fit to
// print on an operator's terminal: control characters (C0 with tab and
// newline, DEL, C1), the Unicode controls that reorder or hide text
// (bidirectional overrides and isolates, zero-width characters, the line and
// paragraph separators) and bytes that are not UTF-8 are written as Go
// escapes (\x1b, \u202e), so an event cannot clear the screen, move the
// cursor, forge a log line or hide part of a line. JSON output needs none
// of this: the encoder escapes them already.
func safe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r < 0x20 || r == 0x7f || hidden(r) {
			return true
		}
		i += size
	}
	return false
}

// hidden reports the non-ASCII runes that control a terminal or change
// how the rest of a line reads.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls, CSI among them
		return true
	case r >= 0x200b && r <= 0x200f: // zero-width spaces and joiners, LRM, RLM
		return true
	case r >= 0x2028 && r <= 0x202e: // line and paragraph separators, bidi embeddings and overrides
		return true
	case r >= 0x2066 && r <= 0x2069: // bidi isolates
		return true
	case r == 0x061c || r == 0xfeff: // Arabic letter mark, zero-width no-break space
		return true
	}
	return false
}

// safeList is safe over each element, joined by commas.
func safeList(s []string) string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = safe(v)
	}
	return strings.Join(out, ",")
}
