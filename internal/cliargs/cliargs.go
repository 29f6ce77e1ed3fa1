// Package cliargs parses a command line of flags and one operand, the
// shape of the module's file-reading commands (cmd/allocview,
// cmd/allocreplay). It imports nothing of the module, so a light command
// stays light.
package cliargs

import (
	"flag"
	"fmt"
)

// ParseOne parses args into fs and wants exactly one operand, which it
// returns. usage is the command's usage line: fs prints it, then its
// flags' defaults, on -h, a bad flag or a missing or extra operand, to its
// output. ok false means the command should exit with status 2.
func ParseOne(fs *flag.FlagSet, args []string, usage string) (operand string, ok bool) {
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return "", false
	}
	return fs.Arg(0), true
}
