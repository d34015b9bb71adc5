// Command riverbus-bench measures riverbus side by side with raw River on
// this machine and writes a table and bench/results.json; `make bench` runs
// it. Its scenarios' child processes are this same binary, re-executed with
// a hidden subcommand, so it needs neither the source nor a Go toolchain.
// `riverbus-bench --help` lists the flags and the scenarios.
package main

import (
	"os"

	"github.com/riverbus/riverbus/internal/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
