package symheap_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
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

// A group's files have their size sealed: a rank process cannot shrink
// one under its peers' mappings (their next access past the end would be
// SIGBUS), and Attach refuses a file that is not sealed.
func TestGroupFilesSizeSealed(t *testing.T) {
	g, err := symheap.NewGroup(2, 1<<12)
	require.NoError(t, err)
	defer g.Close()
	st, err := g.Files()[1].Stat()
	require.NoError(t, err)
	require.Error(t, unix.Ftruncate(int(g.Files()[1].Fd()), 0), "shrinking a rank's file")
	require.Error(t, unix.Ftruncate(int(g.Files()[1].Fd()), st.Size()+4096), "growing a rank's file")
	_, err = symheap.Attach(g.Files(), 1<<12)
	require.NoError(t, err)

	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "unsealed")
	defer f.Close()
	require.NoError(t, f.Truncate(st.Size()))
	_, err = symheap.Attach([]*os.File{g.Files()[0], f}, 1<<12)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.ErrorContains(t, err, "file of rank 1: its size is not sealed")
}
