package alloc_test

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
)

// Allocator options from a configuration string, as PyTorch reads
// PYTORCH_CUDA_ALLOC_CONF (OptionsFromEnv reads CAPALLOC_ALLOC_CONF the
// same way). A typo is an error that lists the keys.
func ExampleParseOptions() {
	opts, err := alloc.ParseOptions("expandable_segments:True,watchdog=30s,name=decode")
	fmt.Println(opts.ExpandableSegments, opts.Watchdog, opts.Name, err)

	_, err = alloc.ParseOptions("expandable_segment=true")
	fmt.Println(errors.Is(err, alloc.ErrInvalidValue))
	// Output:
	// true 30s decode <nil>
	// true
}
