// Package prog holds what the module's example programs (examples/...)
// share: the backends a -backend flag may name, the -backend flag itself,
// serving HTTP until an interrupt, and ending the program on an error.
// The commands (cmd/...) parse their own flag sets, whose tests call run
// with arguments (internal/cliargs serves those).
package prog
