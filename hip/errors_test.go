package hip

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// headerPath is where Debian's libamdhip64-dev puts the header (.ci/run
// installs it).
const headerPath = "/usr/include/hip/hip_runtime_api.h"

// Every hipError_t the installed header declares is in errorNames under
// its code, with its name or as a deprecated alias, and nothing else is.
func TestErrorTableMatchesHeader(t *testing.T) {
	src, err := os.ReadFile(headerPath)
	if err != nil {
		t.Skipf("HIP header not installed (apt-get install libamdhip64-dev): %v", err)
	}
	body := regexp.MustCompile(`(?s)typedef enum __HIP_NODISCARD hipError_t \{(.*?)\} hipError_t;`).FindSubmatch(src)
	require.NotNil(t, body, "enum hipError_t not found in %s", headerPath)
	entries := regexp.MustCompile(`(hip(?:Success|Error\w+))\s*=\s*(\d+)`).FindAllSubmatch(body[1], -1)
	require.Greater(t, len(entries), 60)
	seen := map[int]bool{}
	for _, m := range entries {
		name := string(m[1])
		code, err := strconv.Atoi(string(m[2]))
		require.NoError(t, err)
		seen[code] = true
		n, ok := errorNames[code]
		require.True(t, ok, "%s = %d is not in errorNames", name, code)
		require.True(t, n.name == name || contains(n.aliases, name), "%s = %d: errorNames has %q %v", name, code, n.name, n.aliases)
	}
	seen[1054] = true // hipErrorTbd: the enum's last member, implicitly 1054
	for code, n := range errorNames {
		require.True(t, seen[code], "errorNames has %s = %d, the header does not", n.name, code)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestErrorMapping(t *testing.T) {
	for code, want := range map[int]error{
		1: alloc.ErrInvalidValue, 2: alloc.ErrOutOfMemory, 3: driver.ErrBackendUnavailable, 35: driver.ErrBackendUnavailable,
		100: driver.ErrBackendUnavailable, 101: alloc.ErrInvalidValue, 400: alloc.ErrInvalidValue, 401: alloc.ErrInvalidValue,
		600: driver.ErrDriver, 801: driver.ErrDriver, 900: driver.ErrCaptureIllegalOp, 901: alloc.ErrCaptureInvalidated,
		903: alloc.ErrCaptureInvalidated, 906: driver.ErrCaptureIllegalOp, 907: driver.ErrCaptureIllegalOp,
		908: driver.ErrCaptureWrongThread, 910: alloc.ErrCaptureInvalidated, 999: driver.ErrDriver, 1052: driver.ErrDriver,
		4242: driver.ErrDriver,
	} {
		err := error(&Error{Op: "op", Call: "hipX", Code: code})
		require.ErrorIs(t, err, want, "code %d", code)
	}
	// Every code of the header maps to exactly one sentinel family.
	for code := range errorNames {
		if code == 0 {
			continue
		}
		require.NotNil(t, sentinels.For(code))
	}
}

func TestErrorMessageNamesTheCodeBothWays(t *testing.T) {
	err := error(&Error{Op: "count devices", Call: "hipGetDeviceCount", Code: 100, Text: "hipErrorNoDevice"})
	require.Equal(t, "backend unavailable: hip: count devices: hipGetDeviceCount: no device (hipErrorNoDevice, 100)", err.Error())
	err = &Error{Op: "end capture", Call: "hipStreamEndCapture", Code: 908, Text: "operation not permitted in this thread"}
	require.ErrorIs(t, err, driver.ErrCaptureWrongThread)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Contains(t, err.Error(), `stream capture wrong thread (hipErrorStreamCaptureWrongThread, 908) "operation not permitted in this thread"`,
		"a runtime that explains its codes is quoted")
	require.Contains(t, (&Error{Code: 4242}).Error(), "unknown error (hipError(4242), 4242)")
	require.Equal(t, "out of memory", describe(2))
	var e *Error
	require.ErrorAs(t, errors.Join(errors.New("x"), err), &e)
	require.Equal(t, 908, e.Code)
}
