package cpu

import "github.com/capalloc/capalloc/backends"

func init() { backends.Register("cpu", Open) }
