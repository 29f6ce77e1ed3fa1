// Package alloctest holds test doubles for driver.Driver that engines and
// backends can use in their own tests: the Spy counts every driver call,
// holds a method's calls to emulate a hung driver, and plays deliberately
// broken drivers. The conformance suite is built on it.
package alloctest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Method names one driver.Driver method, for the Spy's counters and hooks.
type Method int

// One constant per driver.Driver method.
const (
	MethodName Method = iota
	MethodInfo
	MethodCaptureDomain
	MethodClose
	MethodCreateStream
	MethodDestroyStream
	MethodStreamSynchronize
	MethodStreamQuery
	MethodStreamCaptureStatus
	MethodMalloc
	MethodFree
	MethodMallocAsync
	MethodFreeAsync
	MethodHostAlloc
	MethodHostFree
	MethodCopyHtoDAsync
	MethodCopyDtoHAsync
	MethodCopyDtoDAsync
	MethodMemsetAsync
	MethodCopyHtoD
	MethodCopyDtoH
	MethodBeginCapture
	MethodEndCapture
	MethodGraphInstantiate
	MethodGraphLaunch
	MethodGraphExecDestroy
	MethodGraphDestroy
	MethodLaunchHostFunc // driver.HostFuncLauncher, forwarded when the inner driver has it
	// driver.IPCMemory, forwarded when the inner driver has it.
	MethodIPCGetMemHandle
	MethodIPCOpenMemHandle
	MethodIPCCloseMemHandle
	// driver.KernelLauncher, forwarded when the inner driver has it.
	MethodLoadModule
	MethodLaunchKernel
	MethodMaxActiveBlocks
	// driver.VirtualMemory, forwarded when the inner driver has it.
	MethodMapGranularity
	MethodReserveAddress
	MethodReleaseAddress
	MethodMapMemory
	MethodUnmapMemory
	// driver.HostRegisterer, forwarded when the inner driver has it
	// (spy_hostreg.go).
	MethodHostRegister
	MethodHostUnregister
	// driver.ManagedMemory, forwarded when the inner driver has it
	// (spy_managed.go).
	MethodMallocManaged
	MethodFreeManaged
	MethodPrefetchManaged
	numMethods
)

var methodNames = [numMethods]string{
	"Name", "Info", "CaptureDomain", "Close", "CreateStream", "DestroyStream",
	"StreamSynchronize", "StreamQuery", "StreamCaptureStatus", "Malloc", "Free",
	"MallocAsync", "FreeAsync", "HostAlloc", "HostFree", "CopyHtoDAsync",
	"CopyDtoHAsync", "CopyDtoDAsync", "MemsetAsync", "CopyHtoD", "CopyDtoH",
	"BeginCapture", "EndCapture", "GraphInstantiate", "GraphLaunch",
	"GraphExecDestroy", "GraphDestroy", "LaunchHostFunc",
	"IPCGetMemHandle", "IPCOpenMemHandle", "IPCCloseMemHandle",
	"LoadModule", "LaunchKernel", "MaxActiveBlocks",
	"MapGranularity", "ReserveAddress", "ReleaseAddress", "MapMemory", "UnmapMemory",
	"HostRegister", "HostUnregister",
	"MallocManaged", "FreeManaged", "PrefetchManaged",
}

func (m Method) String() string {
	if m >= 0 && m < numMethods {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// Counts is a snapshot of the Spy's per-method call counters.
type Counts [numMethods]int64

// Sub returns c - o, method by method.
func (c Counts) Sub(o Counts) Counts {
	for i := range c {
		c[i] -= o[i]
	}
	return c
}

// Total adds up every method's count except the ones listed.
func (c Counts) Total(except ...Method) int64 {
	var n int64
outer:
	for i, v := range c {
		for _, m := range except {
			if Method(i) == m {
				continue outer
			}
		}
		n += v
	}
	return n
}

func (c Counts) String() string {
	var parts []string
	for i, v := range c {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", Method(i), v))
		}
	}
	if len(parts) == 0 {
		return "no calls"
	}
	return strings.Join(parts, " ")
}

// gate holds calls of one method until it is released.
type gate struct {
	ch      chan struct{}
	once    sync.Once
	waiting atomic.Int64
}

// Spy wraps a Driver: it counts every call, can hold a method's calls to
// emulate a hung driver, can refuse capture, and can play a deliberately
// broken driver (snapshotting captured uploads, invalidating a capture while
// reporting success) so the suite can show its checks catch such drivers.
// Internal calls it makes to the inner driver are not counted.
type Spy struct {
	inner  driver.Driver
	counts [numMethods]atomic.Int64
	gates  [numMethods]atomic.Pointer[gate]

	delays     [numMethods]atomic.Int64 // nanoseconds each call waits first
	failBegin  atomic.Pointer[error]
	invalidate [numMethods]atomic.Bool

	snapMu  sync.Mutex
	staging []byte // pinned, from inner.HostAlloc; nil when snapshot mode is off
	used    int
}

// The optional interfaces the Spy implements (alloc/driver/optional.go),
// forwarding each to the inner driver when it has it: its Method constants
// count their calls (TestSpyImplementsItsOptionalInterfaces keeps this
// list exact).
var (
	_ driver.Driver           = (*Spy)(nil)
	_ driver.HostFuncLauncher = (*Spy)(nil)
	_ driver.IPCMemory        = (*Spy)(nil)
	_ driver.KernelLauncher   = (*Spy)(nil)
	_ driver.VirtualMemory    = (*Spy)(nil)
)

// NewSpy wraps inner.
func NewSpy(inner driver.Driver) *Spy { return &Spy{inner: inner} }

// Inner is the wrapped driver, for calls made behind the allocator's back.
func (s *Spy) Inner() driver.Driver { return s.inner }

// Calls is how many times m was called so far.
func (s *Spy) Calls(m Method) int64 { return s.counts[m].Load() }

// Snapshot returns every counter.
func (s *Spy) Snapshot() Counts {
	var c Counts
	for i := range c {
		c[i] = s.counts[i].Load()
	}
	return c
}

// Block holds every later call of m, before it reaches the inner driver,
// until release is called (idempotent). The held call is counted.
func (s *Spy) Block(m Method) (release func()) {
	g := &gate{ch: make(chan struct{})}
	if old := s.gates[m].Swap(g); old != nil {
		old.open()
	}
	return func() {
		g.open()
		s.gates[m].CompareAndSwap(g, nil)
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// Delay makes every later call of m wait d before reaching the inner
// driver (0: no delay), widening race windows for tests that look for a
// call landing where it must not.
func (s *Spy) Delay(m Method, d time.Duration) { s.delays[m].Store(int64(d)) }

// Waiting is how many calls of m are being held right now.
func (s *Spy) Waiting(m Method) int64 {
	if g := s.gates[m].Load(); g != nil {
		return g.waiting.Load()
	}
	return 0
}

// ReleaseAll lets every held call go and stops holding new ones.
func (s *Spy) ReleaseAll() {
	for i := range s.gates {
		if g := s.gates[i].Swap(nil); g != nil {
			g.open()
		}
	}
}

// FailBeginCapture makes BeginCapture return err (nil: forward again),
// without calling the inner driver: a driver that cannot capture.
func (s *Spy) FailBeginCapture(err error) {
	if err == nil {
		s.failBegin.Store(nil)
		return
	}
	s.failBegin.Store(&err)
}

// InvalidateAfterNext arms a one-shot fault: the next call of m (a stream
// method) on a capturing stream is forwarded, then the capture is
// invalidated behind the caller's back, and the call still reports success.
// This is the driver that silently drops an operation during capture.
func (s *Spy) InvalidateAfterNext(m Method) { s.invalidate[m].Store(true) }

// SnapshotCapturedUploads turns the spy into a broken driver: a
// CopyHtoDAsync made while the stream is capturing copies the source bytes
// into private pinned staging memory (stagingSize bytes in all, allocated
// now, before any capture) and records the copy from there, so replays see
// the bytes as they were at capture time.
func (s *Spy) SnapshotCapturedUploads(stagingSize int64) error {
	b, err := s.inner.HostAlloc(stagingSize)
	if err != nil {
		return err
	}
	s.snapMu.Lock()
	old := s.staging
	s.staging, s.used = b, 0
	s.snapMu.Unlock()
	if old != nil {
		return s.inner.HostFree(old)
	}
	return nil
}

// StopSnapshot turns snapshot mode off and frees the staging memory. Graphs
// recorded from it must be closed first.
func (s *Spy) StopSnapshot() error {
	s.snapMu.Lock()
	b := s.staging
	s.staging, s.used = nil, 0
	s.snapMu.Unlock()
	if b == nil {
		return nil
	}
	return s.inner.HostFree(b)
}

// snapshot returns the slice a captured upload should read from.
func (s *Spy) snapshot(src []byte, st driver.Stream) ([]byte, error) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.staging == nil {
		return src, nil
	}
	if cs, err := s.inner.StreamCaptureStatus(st); err != nil || cs != driver.CaptureActive {
		return src, nil
	}
	if len(src) > len(s.staging)-s.used {
		return nil, fmt.Errorf("%w: conformance spy: snapshot staging exhausted (%d B)", alloc.ErrOutOfMemory, len(s.staging))
	}
	dst := s.staging[s.used : s.used+len(src) : s.used+len(src)]
	s.used += len(src)
	copy(dst, src)
	return dst, nil
}

// enter counts a call and holds it while m is blocked.
func (s *Spy) enter(m Method) {
	s.counts[m].Add(1)
	if d := s.delays[m].Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if g := s.gates[m].Load(); g != nil {
		g.waiting.Add(1)
		<-g.ch
		g.waiting.Add(-1)
	}
}

// after applies an armed InvalidateAfterNext fault to a successful call.
func (s *Spy) after(m Method, st driver.Stream, err error) error {
	if err != nil || !s.invalidate[m].Load() {
		return err
	}
	if cs, serr := s.inner.StreamCaptureStatus(st); serr != nil || cs != driver.CaptureActive {
		return err
	}
	if s.invalidate[m].CompareAndSwap(true, false) {
		// An illegal query invalidates the capture in every conforming driver.
		_, _ = s.inner.StreamQuery(st)
	}
	return nil
}

func (s *Spy) Name() string { s.enter(MethodName); return s.inner.Name() }

func (s *Spy) Info() driver.DeviceInfo { s.enter(MethodInfo); return s.inner.Info() }

func (s *Spy) CaptureDomain() string { s.enter(MethodCaptureDomain); return s.inner.CaptureDomain() }

// Close frees snapshot staging and closes the inner driver.
func (s *Spy) Close() error {
	s.enter(MethodClose)
	return errors.Join(s.StopSnapshot(), s.inner.Close())
}

func (s *Spy) CreateStream() (driver.Stream, error) {
	s.enter(MethodCreateStream)
	return s.inner.CreateStream()
}

func (s *Spy) DestroyStream(st driver.Stream) error {
	s.enter(MethodDestroyStream)
	return s.inner.DestroyStream(st)
}

func (s *Spy) StreamSynchronize(st driver.Stream) error {
	s.enter(MethodStreamSynchronize)
	return s.inner.StreamSynchronize(st)
}

func (s *Spy) StreamQuery(st driver.Stream) (bool, error) {
	s.enter(MethodStreamQuery)
	return s.inner.StreamQuery(st)
}

func (s *Spy) StreamCaptureStatus(st driver.Stream) (driver.CaptureStatus, error) {
	s.enter(MethodStreamCaptureStatus)
	return s.inner.StreamCaptureStatus(st)
}

func (s *Spy) Malloc(size int64) (driver.DevicePtr, error) {
	s.enter(MethodMalloc)
	return s.inner.Malloc(size)
}

func (s *Spy) Free(p driver.DevicePtr) error {
	s.enter(MethodFree)
	return s.inner.Free(p)
}

func (s *Spy) MallocAsync(size int64, st driver.Stream) (driver.DevicePtr, error) {
	s.enter(MethodMallocAsync)
	p, err := s.inner.MallocAsync(size, st)
	return p, s.after(MethodMallocAsync, st, err)
}

func (s *Spy) FreeAsync(p driver.DevicePtr, st driver.Stream) error {
	s.enter(MethodFreeAsync)
	return s.after(MethodFreeAsync, st, s.inner.FreeAsync(p, st))
}

func (s *Spy) HostAlloc(size int64) ([]byte, error) {
	s.enter(MethodHostAlloc)
	return s.inner.HostAlloc(size)
}

func (s *Spy) HostFree(b []byte) error {
	s.enter(MethodHostFree)
	return s.inner.HostFree(b)
}

func (s *Spy) CopyHtoDAsync(dst driver.DevicePtr, src []byte, st driver.Stream) error {
	s.enter(MethodCopyHtoDAsync)
	src, err := s.snapshot(src, st)
	if err != nil {
		return err
	}
	return s.after(MethodCopyHtoDAsync, st, s.inner.CopyHtoDAsync(dst, src, st))
}

func (s *Spy) CopyDtoHAsync(dst []byte, src driver.DevicePtr, st driver.Stream) error {
	s.enter(MethodCopyDtoHAsync)
	return s.after(MethodCopyDtoHAsync, st, s.inner.CopyDtoHAsync(dst, src, st))
}

func (s *Spy) CopyDtoDAsync(dst, src driver.DevicePtr, n int64, st driver.Stream) error {
	s.enter(MethodCopyDtoDAsync)
	return s.after(MethodCopyDtoDAsync, st, s.inner.CopyDtoDAsync(dst, src, n, st))
}

func (s *Spy) MemsetAsync(dst driver.DevicePtr, v byte, n int64, st driver.Stream) error {
	s.enter(MethodMemsetAsync)
	return s.after(MethodMemsetAsync, st, s.inner.MemsetAsync(dst, v, n, st))
}

func (s *Spy) CopyHtoD(dst driver.DevicePtr, src []byte, st driver.Stream) error {
	s.enter(MethodCopyHtoD)
	return s.inner.CopyHtoD(dst, src, st)
}

func (s *Spy) CopyDtoH(dst []byte, src driver.DevicePtr, st driver.Stream) error {
	s.enter(MethodCopyDtoH)
	return s.inner.CopyDtoH(dst, src, st)
}

func (s *Spy) BeginCapture(st driver.Stream, mode alloc.CaptureMode) error {
	s.enter(MethodBeginCapture)
	if p := s.failBegin.Load(); p != nil {
		return *p
	}
	return s.inner.BeginCapture(st, mode)
}

func (s *Spy) EndCapture(st driver.Stream) (driver.GraphHandle, error) {
	s.enter(MethodEndCapture)
	return s.inner.EndCapture(st)
}

func (s *Spy) GraphInstantiate(g driver.GraphHandle, autoFree bool) (driver.GraphExec, error) {
	s.enter(MethodGraphInstantiate)
	return s.inner.GraphInstantiate(g, autoFree)
}

func (s *Spy) GraphLaunch(e driver.GraphExec, st driver.Stream) error {
	s.enter(MethodGraphLaunch)
	return s.after(MethodGraphLaunch, st, s.inner.GraphLaunch(e, st))
}

func (s *Spy) GraphExecDestroy(e driver.GraphExec) error {
	s.enter(MethodGraphExecDestroy)
	return s.inner.GraphExecDestroy(e)
}

func (s *Spy) GraphDestroy(g driver.GraphHandle) error {
	s.enter(MethodGraphDestroy)
	return s.inner.GraphDestroy(g)
}

// LaunchHostFunc forwards to the inner driver's driver.HostFuncLauncher, or
// fails with an error wrapping errors.ErrUnsupported when it has none.
func (s *Spy) LaunchHostFunc(st driver.Stream, fn func() error) error {
	s.enter(MethodLaunchHostFunc)
	l, ok := s.inner.(driver.HostFuncLauncher)
	if !ok {
		return fmt.Errorf("%w: %s cannot launch host functions", errors.ErrUnsupported, s.inner.Name())
	}
	return s.after(MethodLaunchHostFunc, st, l.LaunchHostFunc(st, fn))
}

// forwardTo counts a call of method and returns the inner driver as the
// optional interface I that method belongs to; a driver without it gives
// an error wrapping sentinel that says what it lacks.
func forwardTo[I any](s *Spy, method Method, sentinel error, lacks string) (I, error) {
	s.enter(method)
	d, ok := s.inner.(I)
	if !ok {
		return d, fmt.Errorf("%w: %s %s", sentinel, s.inner.Name(), lacks)
	}
	return d, nil
}

// ipc counts a call of method and is the inner driver's
// driver.IPCMemory, or an error wrapping alloc.ErrInvalidValue (what the
// Allocator reports for a driver without IPC) when it has none.
func (s *Spy) ipc(method Method) (driver.IPCMemory, error) {
	return forwardTo[driver.IPCMemory](s, method, alloc.ErrInvalidValue, "has no IPC memory handles")
}

// IPCGetMemHandle, IPCOpenMemHandle and IPCCloseMemHandle forward to the
// inner driver's driver.IPCMemory. Code that must know whether the backend
// has IPC looks through the Spy with Inner.
func (s *Spy) IPCGetMemHandle(p driver.DevicePtr) ([]byte, error) {
	d, err := s.ipc(MethodIPCGetMemHandle)
	if err != nil {
		return nil, err
	}
	return d.IPCGetMemHandle(p)
}

func (s *Spy) IPCOpenMemHandle(handle []byte) (driver.DevicePtr, error) {
	d, err := s.ipc(MethodIPCOpenMemHandle)
	if err != nil {
		return 0, err
	}
	return d.IPCOpenMemHandle(handle)
}

func (s *Spy) IPCCloseMemHandle(p driver.DevicePtr) error {
	d, err := s.ipc(MethodIPCCloseMemHandle)
	if err != nil {
		return err
	}
	return d.IPCCloseMemHandle(p)
}

// LoadModule and LaunchKernel forward to the inner driver's
// driver.KernelLauncher; without one they fail with errors.ErrUnsupported.
func (s *Spy) LoadModule(img driver.ModuleImage) (*driver.Module, error) {
	s.enter(MethodLoadModule)
	k, ok := s.inner.(driver.KernelLauncher)
	if !ok {
		return nil, fmt.Errorf("%w: %s cannot load device code", errors.ErrUnsupported, s.inner.Name())
	}
	return k.LoadModule(img)
}

func (s *Spy) LaunchKernel(k driver.Kernel, grid, block uint32, params []byte, st driver.Stream) error {
	s.enter(MethodLaunchKernel)
	kl, ok := s.inner.(driver.KernelLauncher)
	if !ok {
		return fmt.Errorf("%w: %s cannot launch kernels", errors.ErrUnsupported, s.inner.Name())
	}
	return s.after(MethodLaunchKernel, st, kl.LaunchKernel(k, grid, block, params, st))
}

func (s *Spy) MaxActiveBlocks(k driver.Kernel, block uint32) (int, error) {
	s.enter(MethodMaxActiveBlocks)
	kl, ok := s.inner.(driver.KernelLauncher)
	if !ok {
		return 0, fmt.Errorf("%w: %s cannot launch kernels", errors.ErrUnsupported, s.inner.Name())
	}
	return kl.MaxActiveBlocks(k, block)
}

// vm counts a call of method and is the inner driver's
// driver.VirtualMemory, or an error wrapping errors.ErrUnsupported when it
// has none.
func (s *Spy) vm(method Method) (driver.VirtualMemory, error) {
	return forwardTo[driver.VirtualMemory](s, method, errors.ErrUnsupported, "has no virtual memory management")
}

// MapGranularity forwards to the inner driver's driver.VirtualMemory, and
// is 0 over a driver without one: what alloc.New reads as "no virtual
// memory" (Options.ExpandableSegments then fails there, as on the inner
// driver). The other four fail with errors.ErrUnsupported there.
func (s *Spy) MapGranularity() int64 {
	d, err := s.vm(MethodMapGranularity)
	if err != nil {
		return 0
	}
	return d.MapGranularity()
}

func (s *Spy) ReserveAddress(size int64) (driver.DevicePtr, error) {
	d, err := s.vm(MethodReserveAddress)
	if err != nil {
		return 0, err
	}
	return d.ReserveAddress(size)
}

func (s *Spy) ReleaseAddress(base driver.DevicePtr, size int64) error {
	d, err := s.vm(MethodReleaseAddress)
	if err != nil {
		return err
	}
	return d.ReleaseAddress(base, size)
}

func (s *Spy) MapMemory(p driver.DevicePtr, size int64) error {
	d, err := s.vm(MethodMapMemory)
	if err != nil {
		return err
	}
	return d.MapMemory(p, size)
}

func (s *Spy) UnmapMemory(p driver.DevicePtr, size int64) error {
	d, err := s.vm(MethodUnmapMemory)
	if err != nil {
		return err
	}
	return d.UnmapMemory(p, size)
}
