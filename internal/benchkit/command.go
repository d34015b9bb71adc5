package benchkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Execute runs a bench's root command (NewRoot) with args (without the
// program name) under ctx and returns the process exit code: 0, 1 when the
// bench or a scenario failed, 2 for bad usage (a UsageError), after which
// the usage of the command at fault is printed.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	// Prefixed by the child's name when a child failed, as its parent
	// quotes its last line of stderr.
	fmt.Fprintf(stderr, "%s: %s\n", cmd.Name(), Printable(err.Error()))
	var uerr *UsageError
	if errors.As(err, &uerr) {
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return 2
	}
	return 1
}

// UsageError is bad usage: a flag, an argument or a variable that does not
// parse. Execute returns 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err as bad usage.
func Usage(err error) error { return &UsageError{err} }

// NewRoot returns a bench's root command: the flags every bench takes
// (--runs, --scale, --scenario, --json, --database-url, and the hidden
// --smoke of the smoke tests) into Opts, checked against d and the
// scenarios' names before run is called with them, under a context that
// ends on SIGINT or SIGTERM. It takes no arguments and has no help or
// completion subcommand; errors and usage are Execute's to print.
func NewRoot(use, short, long, example string, d Defaults, names []string, run func(ctx context.Context, o Opts) error) *cobra.Command {
	var (
		o         Opts
		scenarios string
	)
	root := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return Usage(err)
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Scenarios = SplitList(scenarios)
			if _, _, err := o.Normalize(d, names); err != nil {
				return Usage(err)
			}
			// Only the bench stops on a signal: a child dies of it.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, o)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	f := root.Flags()
	f.IntVar(&o.Runs, "runs", 0, fmt.Sprintf("measurements per scenario (default %d)", d.Runs))
	f.Float64Var(&o.Scale, "scale", 0, "size and duration multiplier: 1 is the full benchmark, 0.1 a quick look (default 1)")
	f.StringVar(&scenarios, "scenario", "", "comma-separated scenarios to run (default: all)")
	f.StringVar(&o.JSONPath, "json", "", "where to write the JSON report (default "+d.JSONPath+")")
	// Its default is not shown: a URL may carry a password.
	f.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL URL (default: "+d.DatabaseEnv+"; neither: a throwaway server)")
	f.BoolVar(&o.Smoke, "smoke", false, "run every scenario at its least cost, for the smoke tests: the figures mean nothing")
	_ = f.MarkHidden("smoke")
	// No help subcommand: --help is the help, and the subcommands (the
	// bench's child processes) are hidden.
	root.SetHelpCommand(&cobra.Command{Hidden: true})
	return root
}

// RunAsChild runs main as the program's child process and exits with its
// code when os.Args starts one (a subcommand of subcommands first): a
// bench's tests call it from TestMain, because the bench starts its child
// processes by re-executing its program, there the test binary.
func RunAsChild(main func(args []string, stdout, stderr io.Writer) int, subcommands ...string) {
	if len(os.Args) > 1 && slices.Contains(subcommands, os.Args[1]) {
		os.Exit(main(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// SplitList splits a comma-separated list, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Printable escapes what would control the terminal (control and format
// characters, bytes that are not UTF-8) in an error, which may quote what
// a server or a child process printed.
func Printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// SmokeRun runs a bench's command line as its smoke test does: the root
// command that command makes (printing to the writers it is given) with
// args, --smoke and --json jsonPath, under ctx. It returns the JSON report
// written, what the command printed on stdout, and its progress lines that
// say how long each scenario took; or an error quoting all it printed when
// it did not exit 0. The error leads with the lines that say what failed:
// a CI log keeps the head and tail of a long failure and drops its middle,
// where the table would otherwise push them.
func SmokeRun(ctx context.Context, command func(stdout, stderr io.Writer) *cobra.Command, jsonPath string, args ...string) (report []byte, stdout, took string, err error) {
	var out, errOut bytes.Buffer
	if code := Execute(ctx, command(&out, &errOut), append(args, "--smoke", "--json", jsonPath), &out, &errOut); code != 0 {
		var failed []string
		for _, line := range strings.Split(errOut.String(), "\n") {
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "failed") {
				failed = append(failed, line)
			}
		}
		return nil, "", "", fmt.Errorf("exit code %d\nwhat failed:\n%s\nstdout:\n%s\nstderr:\n%s", code, strings.Join(failed, "\n"), out.String(), errOut.String())
	}
	var lines []string
	for _, line := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(line, "scenario done") {
			lines = append(lines, line)
		}
	}
	report, err = os.ReadFile(jsonPath)
	return report, out.String(), strings.Join(lines, "\n"), err
}
