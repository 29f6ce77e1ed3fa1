package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/ranks"
)

// The device heap's process tests run ranks as processes of this test
// binary: runRanks starts them, asRank is what each of them does.

// asRank runs child with this process's spec when the test binary was
// started as one of a test's rank processes (env set, by runRanks), and
// reports whether it was: the test itself then does nothing else.
func asRank(t *testing.T, env string, child func(t *testing.T, spec string)) bool {
	spec := os.Getenv(env)
	if spec != "" {
		child(t, spec)
	}
	return spec != ""
}

// runRanks runs n processes of this test binary, each running test alone
// with env set to spec(rank, dir), dir a fresh private directory they
// share (FileExchange wants one), waits for all of them and requires each
// to have passed, showing a failed rank's output.
func runRanks(t *testing.T, test, env string, n int, spec func(r int, dir string) string) {
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for r := range n {
		cmds[r] = exec.Command(exe, "-test.run=^"+test+"$", "-test.count=1", "-test.v")
		cmds[r].Env = append(os.Environ(), env+"="+spec(r, dir))
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
	}
	for r, err := range ranks.Processes(cmds) {
		if err != nil {
			t.Errorf("%v\n%s", err, outs[r].String()) // err names the rank
		}
	}
}
