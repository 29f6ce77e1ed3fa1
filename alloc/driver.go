package alloc

import "github.com/capalloc/capalloc/alloc/driver"

// The driver contract lives in package alloc/driver, as database/sql's
// lives in database/sql/driver. An engine names the capture mode here;
// the other types it passes through (driver.DevicePtr, driver.Stream,
// driver.DeviceInfo) it names there.

// CaptureMode is the stream capture mode (driver.CaptureMode), with CUDA's
// meaning (cudaStreamCaptureMode): it decides which other calls a capture
// forbids.
type CaptureMode = driver.CaptureMode

const (
	// Global: while the capture is active, potentially unsafe calls are
	// refused on this stream and, process wide, from every allocator whose
	// interaction mode is Global.
	Global = driver.Global
	// ThreadLocal: unsafe calls are refused only on the capturing stream.
	ThreadLocal = driver.ThreadLocal
	// Relaxed: unsafe calls that do not touch the capturing stream (an eager
	// synchronous allocation, say) are allowed; calls on the capturing stream
	// that would synchronize it are still refused.
	Relaxed = driver.Relaxed
)
