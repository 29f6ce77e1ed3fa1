package symheap_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/symheap"
)

// The group's files reach the processes they are given to (ExtraFiles)
// and no other child process.
func TestFilesReachOnlyTheRanksTheyAreGivenTo(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	g, err := symheap.NewGroup(2, 1<<12)
	require.NoError(t, err)
	defer g.Close()
	fds := func(cmd *exec.Cmd) string {
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	other := fds(exec.Command("sh", "-c", "ls -l /proc/self/fd/"))
	require.NotContains(t, other, "capalloc-symheap", "an unrelated child inherits no heap")
	rank := exec.Command("sh", "-c", "ls -l /proc/self/fd/")
	rank.ExtraFiles = g.Files()
	got := fds(rank)
	require.Equal(t, 2, strings.Count(got, "memfd:capalloc-symheap"), "a rank process gets every heap:\n%s", got)
}
