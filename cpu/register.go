package cpu

import "github.com/capalloc/capalloc/backends"

// Registered as "cpu" so programs can pick it by name (backends.OpenDriver).
func init() { backends.Register("cpu", Open) }
