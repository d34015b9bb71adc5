package riverbus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// Every relative link of the README and the pages under docs/ leads to a
// file of the repository and, with a #fragment, to a heading of that file,
// so that moving a section or renaming a heading cannot leave a reader at a
// dead link. The database is not needed.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"README.md"}, pages...)
	require.Greater(t, len(pages), 1, "docs/ holds the reference pages")

	anchors := map[string]map[string]bool{} // page → its headings' anchors
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		anchors[page] = markdownAnchors(string(text))
		return anchors[page]
	}

	var broken []string
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, target := range markdownLinks(string(text)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s: no such file", page, target))
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				broken = append(broken, fmt.Sprintf("%s: %s: a fragment of a file that is not Markdown", page, target))
				continue
			}
			if !anchorsOf(file)[fragment] {
				broken = append(broken, fmt.Sprintf("%s: %s: %s has no heading with that anchor", page, target, file))
			}
		}
	}
	require.Empty(t, broken, "broken links")
}

// The anchors follow GitHub's rules, as a reader's browser meets them.
func TestMarkdownAnchors(t *testing.T) {
	t.Parallel()
	got := markdownAnchors("# riverbus\n" +
		"## §2.1 Proving a gap rolled back\n" +
		"## River's control messages\n" +
		"```\n## not a heading\n```\n" +
		"### Failover: a promoted standby\n" +
		"## A fan-out that does not own `river_job`\n" +
		"## Pausing, resuming, resetting\n" +
		"## Pausing, resuming, resetting\n")
	want := map[string]bool{
		"riverbus":                              true,
		"21-proving-a-gap-rolled-back":          true,
		"rivers-control-messages":               true,
		"failover-a-promoted-standby":           true,
		"a-fan-out-that-does-not-own-river_job": true,
		"pausing-resuming-resetting":            true,
		"pausing-resuming-resetting-1":          true,
	}
	require.Equal(t, want, got)
}

var (
	fencedCode = regexp.MustCompile("(?ms)^```.*?^```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// A link's text may wrap onto the next line; its target may not.
	markdownLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	headingLine  = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	linkInText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// markdownLinks returns the targets of the inline links of text, outside
// code.
func markdownLinks(text string) []string {
	text = fencedCode.ReplaceAllString(text, "")
	text = inlineCode.ReplaceAllString(text, "")
	var targets []string
	for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
		targets = append(targets, m[1])
	}
	return targets
}

// markdownAnchors returns the anchors GitHub gives the headings of text:
// the heading's text lowercased, spaces turned into hyphens, every other
// character but letters, digits, '-' and '_' dropped, and "-1", "-2", ...
// added to repeats.
func markdownAnchors(text string) map[string]bool {
	text = fencedCode.ReplaceAllString(text, "")
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingLine.FindAllStringSubmatch(text, -1) {
		heading := linkInText.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor = fmt.Sprintf("%s-%d", anchor, n)
		} else {
			seen[anchor] = 1
		}
		anchors[anchor] = true
	}
	return anchors
}
