package prog

import (
	"fmt"
	"os"
)

// ExitOnError ends the program with status 1, after "name: err" on
// stderr, when err is not nil, and returns otherwise: an example's main
// ends with ExitOnError(name, run(...)).
func ExitOnError(name string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
