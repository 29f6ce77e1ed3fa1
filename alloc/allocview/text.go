package allocview

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable is s as the views show it: every byte that is not UTF-8, every
// control character and every rune XML forbids (U+FFFE, U+FFFF) becomes
// U+FFFD. Names come from the engine (alloc.Options.Name) and the driver
// (device and backend names); once printable and then HTML-escaped, any of
// them makes well-formed HTML and SVG.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r == 0xFFFE || r == 0xFFFF || unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}
