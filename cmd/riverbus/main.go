// Command riverbus runs and operates riverbus: migrations, fan-out, pools,
// status, dead letters, the demo. `riverbus --help` lists the commands.
package main

import (
	"os"

	"github.com/riverbus/riverbus/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
