package backends_test

import (
	"context"
	"fmt"

	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu" // registers "cpu"
)

// A fallback chain: the first backend that opens wins, and the report says
// why each earlier one was skipped (here an unregistered name stands for a
// GPU backend this machine lacks).
func ExampleOpenString() {
	o, err := backends.OpenString(context.Background(), "no-such-gpu:device=0;cpu:memory_limit=1GiB")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Driver.Close()
	fmt.Println(o.Choice)
	fmt.Println(len(o.Skipped), "skipped:", o.Skipped[0].Choice.Name)
	// Output:
	// cpu:memory_limit=1GiB
	// 1 skipped: no-such-gpu
}
