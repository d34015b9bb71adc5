// Command riverbus-watermill-bench measures riverbus's Watermill adapter
// beside watermill-sql v4 on the same PostgreSQL server in the same run,
// prints a table and writes bench/watermill.json; `make bench` runs it after
// the core bench. Its subscriber processes are this same binary,
// re-executed with a hidden subcommand. `riverbus-watermill-bench --help`
// lists the flags and the scenarios.
package main

import (
	"os"

	"github.com/riverbus/riverbus/watermill/internal/wmbench"
)

func main() {
	os.Exit(wmbench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
