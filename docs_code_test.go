package riverbus_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
)

// docPages are the pages whose code these tests check: the README and the
// pages under docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	return append([]string{"README.md"}, pages...)
}

// fence is a fenced code block of a page.
type fence struct {
	page   string
	line   int    // the line of its first line of code
	lang   string // what follows the opening ```
	marker string // the line before the opening ```, trimmed
	lines  []string
}

// readPage returns the fenced blocks of page and its text with the lines
// of those blocks (fences included) blanked, so that what is left is the
// prose, at the same line numbers.
func readPage(t *testing.T, page string) ([]fence, string) {
	t.Helper()
	text, err := os.ReadFile(page)
	require.NoError(t, err)
	lines := strings.Split(string(text), "\n")
	var (
		fences []fence
		open   *fence
		prose  = make([]string, len(lines))
	)
	for i, l := range lines {
		switch {
		case open == nil && strings.HasPrefix(l, "```"):
			f := fence{page: page, line: i + 2, lang: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
			if i > 0 {
				f.marker = strings.TrimSpace(lines[i-1])
			}
			open = &f
		case open != nil && strings.TrimSpace(l) == "```":
			fences = append(fences, *open)
			open = nil
		case open != nil:
			open.lines = append(open.lines, l)
		default:
			prose[i] = l
		}
	}
	require.Nil(t, open, "%s: a code block is never closed", page)
	return fences, strings.Join(prose, "\n")
}

var (
	fragmentMarker = regexp.MustCompile(`^<!-- fragment: (.+) -->$`)
	fileMarker     = regexp.MustCompile(`^<!-- go file: ([a-z0-9_]+)/([a-z0-9_]+\.go) -->$`)
	goDirective    = regexp.MustCompile(`(?m)^go (\S+)$`)
)

// Every ```go block of the README and of the pages under docs/ compiles
// against this checkout, so that the code a reader copies cannot drift
// from the API. The rule:
//
//   - A block is a whole Go file, package clause and imports included.
//   - `<!-- go file: DIR/NAME.go -->` on the line before the block's fence
//     names the file: the blocks of one page with the same DIR are one
//     package (a program and its test, say). A block without it is a
//     package of its own.
//   - `<!-- fragment: WHY -->` on that line marks a block that is not a
//     whole file: it is skipped, and the test logs why.
//
// The packages go into one temporary module that requires
// github.com/riverbus/riverbus, replaced by this checkout, with the
// checkout's go.sum; `go vet` type-checks them, test files included. The
// modules come from the module cache the checkout's own build filled, and
// from the environment's GOPROXY for the few go.mod files the temporary
// module's graph reads that the checkout's pruned graph never did (on a
// fresh cache, go-logr's: so the proxy is not switched off). A //line
// directive makes each error name the page and line of the block.
func TestDocsGoBlocksCompile(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	gomod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	goVersion := goDirective.FindSubmatch(gomod)
	require.NotNil(t, goVersion, "go.mod has a go directive")

	mod := t.TempDir()
	files := 0
	for _, page := range docPages(t) {
		fences, _ := readPage(t, page)
		slug := strings.Map(func(r rune) rune {
			if unicode.IsLetter(r) || unicode.IsDigit(r) {
				return unicode.ToLower(r)
			}
			return '_'
		}, strings.TrimSuffix(page, ".md"))
		for _, f := range fences {
			if f.lang != "go" {
				continue
			}
			if m := fragmentMarker.FindStringSubmatch(f.marker); m != nil {
				t.Logf("%s:%d: a fragment, not compiled: %s", f.page, f.line, m[1])
				continue
			}
			dir, name := fmt.Sprintf("%s_%d", slug, f.line), "main.go"
			if m := fileMarker.FindStringSubmatch(f.marker); m != nil {
				dir, name = slug+"_"+m[1], m[2]
			}
			path := filepath.Join(mod, dir, name)
			_, err := os.Stat(path)
			require.True(t, os.IsNotExist(err), "%s:%d: a second block for %s/%s", f.page, f.line, dir, name)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			src := fmt.Sprintf("//line %s:%d\n%s\n", filepath.Join(root, f.page), f.line, strings.Join(f.lines, "\n"))
			require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
			files++
		}
	}
	require.NotZero(t, files, "the README has Go to compile")

	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), fmt.Appendf(nil,
		"module example.com/docs\n\ngo %s\n\nrequire github.com/riverbus/riverbus v0.0.0\n\nreplace github.com/riverbus/riverbus => %s\n",
		goVersion[1], root), 0o644))
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCommand(t), "vet", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the Go blocks of the docs do not compile:\n%s", out)
}

// goCommand is the go command of the toolchain running the tests.
func goCommand(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	require.NoError(t, err, "the go command")
	return p
}

// docCommand is a riverbus command line shown in a page.
type docCommand struct {
	page string
	line int
	text string // from "riverbus" on
	// strict: the words after riverbus must name a command. Otherwise the
	// text is checked only when its first word names one (prose such as
	// a log message `riverbus stopped delivering` is not a command).
	strict bool
}

var (
	envAssignments = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"]*"|\S*)\s+)*`)
	codeSpan       = regexp.MustCompile("`([^`]+)`")
	quoted         = regexp.MustCompile(`'[^']*'|"[^"]*"`)
	comment        = regexp.MustCompile(`\s#`)
	flagName       = regexp.MustCompile(`(?:^|[\s\[(|])(--?[A-Za-z][\w-]*)`)
)

// isRiverbus reports whether word is the riverbus command: riverbus, or a
// path to it such as ./bin/riverbus.
func isRiverbus(word string) bool {
	return word == "riverbus" || strings.HasSuffix(word, "/bin/riverbus")
}

// docCommands returns the riverbus command lines of page:
//
//   - in a shell block (```sh, bash, shell, console), a line whose command
//     (after a "$ " prompt and VAR=value assignments) is riverbus: strict.
//     A line that begins with "[" or "-" continues it;
//   - in any code block, each other "riverbus WORD" (output, a comment):
//     lenient;
//   - in prose, `inline code` that begins with riverbus: lenient.
func docCommands(t *testing.T, page string) []docCommand {
	t.Helper()
	fences, prose := readPage(t, page)
	var cmds []docCommand
	for _, f := range fences {
		shell := slices.Contains([]string{"sh", "bash", "shell", "console"}, f.lang)
		continued := false
		for i, l := range f.lines {
			line := f.line + i
			trimmed := strings.TrimSpace(l)
			if shell && continued && (strings.HasPrefix(trimmed, "[") || strings.HasPrefix(trimmed, "-")) {
				cmds[len(cmds)-1].text += " " + cutCommand(trimmed)
				continue
			}
			continued = false
			start := -1
			if shell {
				rest := strings.TrimPrefix(trimmed, "$ ")
				rest = rest[len(envAssignments.FindString(rest)):]
				if first, _, _ := strings.Cut(rest, " "); isRiverbus(first) {
					start = strings.Index(l, rest)
					cmds = append(cmds, docCommand{page: page, line: line, text: cutCommand(l[start:]), strict: true})
					continued = true
				}
			}
			for _, at := range riverbusAt(l) {
				if at != start {
					cmds = append(cmds, docCommand{page: page, line: line, text: cutCommand(l[at:])})
				}
			}
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatchIndex(prose, -1) {
		span := strings.Join(strings.Fields(prose[m[2]:m[3]]), " ")
		if first, _, _ := strings.Cut(span, " "); isRiverbus(first) {
			cmds = append(cmds, docCommand{page: page, line: 1 + strings.Count(prose[:m[0]], "\n"), text: span})
		}
	}
	return cmds
}

// riverbusAt returns where in line the word riverbus (or a path to it)
// begins a "riverbus WORD ...".
func riverbusAt(line string) []int {
	var at []int
	for i := 0; ; {
		j := strings.Index(line[i:], "riverbus ")
		if j < 0 {
			return at
		}
		j += i
		k := j
		for k > 0 && !strings.ContainsRune(" \t(`\"'", rune(line[k-1])) {
			k--
		}
		if isRiverbus(line[k : j+len("riverbus")]) {
			at = append(at, k)
		}
		i = j + len("riverbus ")
	}
}

// cutCommand ends a command line where its comment or code span ends.
func cutCommand(s string) string {
	s, _, _ = strings.Cut(s, "`")
	if loc := comment.FindStringIndex(s); loc != nil {
		s = s[:loc[0]]
	}
	return strings.TrimSpace(s)
}

// Every riverbus command line that the README and the pages under docs/
// show (see docCommands) names commands that exist, and every --flag or -f
// it names exists on its command, so that the docs cannot drift from the
// CLI. Alternatives separated by " | " are checked each: one that begins
// with a sibling command's name is that command ("pool list | show ID"),
// any other the same command ("--keep D | --off").
func TestDocsCommandsExist(t *testing.T) {
	t.Parallel()
	root := cli.Command()
	var bad []string
	checked := 0
	for _, page := range docPages(t) {
		for _, c := range docCommands(t, page) {
			problems, ok := checkCommand(root, c)
			if ok {
				checked++
			}
			for _, p := range problems {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", c.page, c.line, c.text, p))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("commands the docs show that riverbus does not have:\n%s", strings.Join(bad, "\n"))
	}
	require.Greater(t, checked, 50, "the docs show riverbus commands")
}

// checkCommand returns what is wrong with c, and whether it was checked.
func checkCommand(root *cobra.Command, c docCommand) ([]string, bool) {
	segments := strings.Split(quoted.ReplaceAllString(c.text, "X"), " | ")
	words := strings.Fields(segments[0])[1:]
	cmd := root
	for len(words) > 0 {
		sub := subcommand(cmd, words[0])
		if sub == nil {
			break
		}
		cmd, words = sub, words[1:]
	}
	if cmd == root && (len(words) == 0 || !strings.HasPrefix(words[0], "-")) {
		if !c.strict || len(words) > 0 && strings.ToUpper(words[0]) == words[0] { // `riverbus COMMAND --help`
			return nil, false
		}
		if len(words) == 0 {
			return nil, true
		}
		return []string{fmt.Sprintf("riverbus has no command %q", words[0])}, true
	}
	var problems []string
	if !cmd.Runnable() && len(words) > 0 && !strings.HasPrefix(words[0], "-") && strings.ToUpper(words[0]) != words[0] {
		problems = append(problems, fmt.Sprintf("%q has no command %q", cmd.CommandPath(), words[0]))
	}
	problems = append(problems, unknownFlags(cmd, segments[0])...)
	for _, seg := range segments[1:] {
		if first, _, _ := strings.Cut(strings.TrimSpace(seg), " "); cmd.HasParent() {
			if sibling := subcommand(cmd.Parent(), first); sibling != nil {
				cmd = sibling
			}
		}
		problems = append(problems, unknownFlags(cmd, seg)...)
	}
	return problems, true
}

// subcommand returns cmd's subcommand named name, nil when there is none.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, sub := range cmd.Commands() {
		if sub.Name() == name || slices.Contains(sub.Aliases, name) {
			return sub
		}
	}
	return nil
}

// unknownFlags returns a problem for each flag in text that cmd does not
// take.
func unknownFlags(cmd *cobra.Command, text string) []string {
	var problems []string
	for _, m := range flagName.FindAllStringSubmatch(text, -1) {
		flag := m[1]
		var found bool
		if name, ok := strings.CutPrefix(flag, "--"); ok {
			found = name == "help" || cmd.Flags().Lookup(name) != nil || cmd.PersistentFlags().Lookup(name) != nil ||
				cmd.InheritedFlags().Lookup(name) != nil
		} else if len(flag) == 2 {
			s := flag[1:]
			found = s == "h" || cmd.Flags().ShorthandLookup(s) != nil || cmd.PersistentFlags().ShorthandLookup(s) != nil ||
				cmd.InheritedFlags().ShorthandLookup(s) != nil
		} else {
			continue // -1, a negative number; not a flag
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%q has no flag %s", cmd.CommandPath(), flag))
		}
	}
	return problems
}

// Every runnable example of package riverbus is in the README's table of
// examples, where a reader looks for what to copy.
func TestReadmeListsTheExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	var missing []string
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			if !strings.Contains(string(readme), "| `"+fn.Name.Name+"`") {
				missing = append(missing, fmt.Sprintf("%s (%s)", fn.Name.Name, file))
			}
		}
	}
	require.Empty(t, missing, "examples missing from the README's table")
}
