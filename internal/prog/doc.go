// Package prog holds what the module's commands (cmd/...) and examples
// (examples/...) share: the backends a -backend flag may name, the
// -backend flag itself, serving HTTP until an interrupt, and ending the
// program on an error.
package prog
