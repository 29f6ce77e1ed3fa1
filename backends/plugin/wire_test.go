package plugin

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// replyWithFailures is an OK reply with no capture view that reports m
// failures of pipelined operations, each on stream(i) with the text text.
func replyWithFailures(m int, stream func(i int) driver.Stream, text string) []byte {
	e := &enc{b: []byte{replyOK}}
	e.u64(0).u64(0).u64(uint64(m))
	for i := range m {
		e.u64(uint64(opMemsetAsync)).u64(uint64(stream(i)))
		e.u64(0).str(text)
	}
	return e.b
}

func oneStream(int) driver.Stream { return 7 }

// The most a child reports in one reply, the failures the backend keeps
// for one stream and the entry that counts the rest, decodes.
func TestReplyCarriesEveryFailureOneStreamKeeps(t *testing.T) {
	srv := newServer()
	for range 3 * maxFailedKept {
		srv.failed.add(7, opMemsetAsync, fmt.Errorf("%w: boom", alloc.ErrInvalidValue))
	}
	rep := &reply{}
	rep.report(srv, 7)
	r, err := decodeReply(srv.encodeReply(rep, nil))
	require.NoError(t, err)
	require.Len(t, r.async, maxReported)
	require.ErrorIs(t, r.async[0], alloc.ErrInvalidValue)
	require.Contains(t, r.async[maxReported-1].Error(), fmt.Sprintf("%d more pipelined operations", 2*maxFailedKept))

	long := strings.Repeat("x", 2*maxErrText)
	r, err = decodeReply(srv.encodeReply(&reply{}, fmt.Errorf("%w: %s", alloc.ErrOutOfMemory, long)))
	require.NotNil(t, r, "the child cuts a long text to what the host accepts")
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Len(t, err.Error(), maxErrText+len(errTextCut))
}

// A child that floods a reply with failures (a 16 MiB reply of 4-byte
// entries) is refused as malformed before the host decodes them.
func TestReplyFloodedWithFailuresIsRefused(t *testing.T) {
	const flood = 4_194_288
	b := replyWithFailures(flood, oneStream, "")
	require.Less(t, len(b), 16<<20+16)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := decodeReply(b)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, errMalformed)
	require.ErrorIs(t, err, driver.ErrDriver)
	require.Nil(t, r)
	require.Contains(t, err.Error(), fmt.Sprintf("%d failures", flood))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "the refusal allocates next to nothing")

	_, err = decodeReply(replyWithFailures(maxReported+1, oneStream, "e"))
	require.ErrorIs(t, err, errMalformed, "one more than a call can report")
	_, err = decodeReply(replyWithFailures(maxReported, oneStream, "e"))
	require.NoError(t, err)
}

// A call reports one stream's failures: entries on two streams are a
// forged reply.
func TestReplyWithFailuresOnTwoStreamsIsRefused(t *testing.T) {
	_, err := decodeReply(replyWithFailures(2, func(i int) driver.Stream { return driver.Stream(7 + i) }, "e"))
	require.ErrorIs(t, err, errMalformed)
}

// An error's text longer than the child ever sends is refused, in a
// reported failure and as the call's error, so a reply's error text stays
// bounded.
func TestReplyWithOverlongErrorTextIsRefused(t *testing.T) {
	long := strings.Repeat("x", maxErrText+len(errTextCut)+1)
	_, err := decodeReply(replyWithFailures(1, oneStream, long))
	require.ErrorIs(t, err, errMalformed)

	e := &enc{b: []byte{replyErr}}
	e.u64(0).u64(0).u64(0)
	e.u64(0).str(long)
	r, err := decodeReply(e.b)
	require.Nil(t, r)
	require.ErrorIs(t, err, errMalformed)

	e = &enc{b: []byte{replyErr}}
	e.u64(0).u64(0).u64(0)
	e.u64(0).str(long[:maxErrText+len(errTextCut)])
	r, err = decodeReply(e.b)
	require.NotNil(t, r, "the longest text the child sends decodes")
	require.ErrorIs(t, err, driver.ErrDriver)
	require.NotErrorIs(t, err, errMalformed)
}
