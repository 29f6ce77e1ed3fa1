package symheap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// Where the ranks' devices are, and what follows for the collectives
// (docs/device-collectives.md, "Grids"; docs/symmetric-heap.md, "Peer
// access").
//
// Every collective's blocks wait at barriers for block b of every rank, so
// every rank's blocks on one device must be resident at once. At open each
// rank tells the others its device (Module.DeviceID, the same in every
// process) and how many blocks of every collective kernel the device runs
// at once; every rank then takes the same grid limit: the least, over
// devices, of the device's resident blocks divided among the ranks on it
// (and at most kernels.MaxBlocks). A limit of 0 is ErrNotCoResident on
// every rank, before anything launches.
//
// Ranks of one process on different devices reach each other's heaps at
// their addresses, which a device's kernels may do only once peer access
// from it to the other device is enabled: each rank enables it from its
// device to every other device of its process's peers, and a pair that
// cannot is ErrNoPeerAccess on every rank. Ranks in other processes are
// opened through IPC, which maps with peer access itself.

// rankDevice is what a rank tells the others of its device, in the open's
// confirm round.
type rankDevice struct {
	runs      bool   // its collectives run (its driver loaded the kernels)
	id        string // Module.DeviceID; "" unknown: counted with every rank
	device    int    // its ordinal in its process
	perSM     int    // blocks of limiting one multiprocessor holds
	sms       int    // multiprocessors
	limiting  string // the collective kernel with the fewest blocks per multiprocessor
	occupancy bool   // perSM came from the occupancy query (else 1 is assumed)
	// The aligned variants' perSM and limiting kernel, and whether every
	// allocation this rank maps starts 16-aligned (the variants need it).
	perSMAligned    int
	limitingAligned string
	aligned         bool
	oneShotMax      int64          // Auto's crossover for its device and the heap's ranks (auto.go)
	copyMin         [copyOps]int64 // Auto's copy-engine thresholds for them (copyengine.go)
}

func (h *DeviceHeap) rankDevice() rankDevice {
	k := h.kern
	if k == nil {
		return rankDevice{}
	}
	aligned := true
	for _, b := range h.bases {
		aligned = aligned && (uint64(b)+SignalPadBytes)%16 == 0
	}
	kind := DeviceKind(h.a.Driver().Info().Name)
	oneShotMax, _ := OneShotMaxFor(kind, h.Ranks())
	return rankDevice{runs: true, id: k.mod.DeviceID, device: k.mod.Device, perSM: k.perSM, sms: k.mod.Multiprocessors,
		limiting: k.limiting, occupancy: k.occupancy, perSMAligned: k.perSMAligned, limitingAligned: k.limitingAligned, aligned: aligned,
		oneShotMax: oneShotMax, copyMin: copyEngineMins(kind, h.Ranks())}
}

// alignedView is d with the aligned variants' figures in place of the
// general kernels', for coResidentGrid.
func (d rankDevice) alignedView() rankDevice {
	d.perSM, d.limiting = d.perSMAligned, d.limitingAligned
	return d
}

func (d rankDevice) resident() int { return d.perSM * d.sms }

func (d rankDevice) encode() []byte {
	if !d.runs {
		return nil
	}
	b := []byte{1, boolByte(d.occupancy), boolByte(d.aligned)}
	for _, v := range d.words() {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for _, s := range []string{d.id, d.limiting, d.limitingAligned} {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b
}

// rankDeviceWords is how many 8-byte figures a description carries, in
// the order of words and setWords.
const rankDeviceWords = 5 + copyOps

// words are d's figures as a description carries them.
func (d rankDevice) words() [rankDeviceWords]int64 {
	return [rankDeviceWords]int64{int64(d.device), int64(d.perSM), int64(d.sms), int64(d.perSMAligned), d.oneShotMax, d.copyMin[copyAllGather], d.copyMin[copyAllToAll]}
}

// setWords sets d's figures from w, in words' order.
func (d *rankDevice) setWords(w [rankDeviceWords]int64) {
	d.device, d.perSM, d.sms, d.perSMAligned = int(w[0]), int(w[1]), int(w[2]), int(w[3])
	d.oneShotMax, d.copyMin[copyAllGather], d.copyMin[copyAllToAll] = w[4], w[5], w[6]
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// Bounds on what a rank's device description may carry: what no real
// device sends is refused (ErrPeerOpen naming the field), so one bad peer
// fails every rank's open with the same clear error instead of an
// overflow in resident or a grid computed from nonsense.
const (
	// maxDeviceOrdinal bounds a device ordinal (a process sees far fewer).
	maxDeviceOrdinal = 1 << 10
	// maxBlocksPerSM bounds blocks per multiprocessor: none holds more
	// resident threads than this, and every block has at least one.
	maxBlocksPerSM = 1 << 12
	// maxMultiprocessors bounds SMs / CUs per device.
	maxMultiprocessors = 1 << 16
	// maxThresholdBytes bounds Auto's byte thresholds other than
	// NoCopyEngine (256 TiB: past any device's memory).
	maxThresholdBytes = 1 << 48
	// maxDeviceIDLen is the longest PCI bus id a runtime writes
	// (internal/gpurt's buffer for it).
	maxDeviceIDLen = 64
)

// decodeRankDevice decodes a rank's device description: an empty one is a
// rank whose collectives do not run; anything else must be exactly what
// encode writes for figures within the bounds above (flags 0 or 1, the
// kernels' names or none, no trailing bytes), or it is ErrPeerOpen naming
// the field.
func decodeRankDevice(b []byte) (rankDevice, error) {
	if len(b) == 0 {
		return rankDevice{}, nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: a device description of %d B: %s", ErrPeerOpen, len(b), fmt.Sprintf(format, args...))
	}
	const head = 3 + 8*rankDeviceWords
	if len(b) < head {
		return rankDevice{}, bad("shorter than its %d B of flags and figures", head)
	}
	for i, name := range []string{"version", "occupancy flag", "alignment flag"} {
		if b[i] > 1 || (i == 0 && b[i] != 1) {
			return rankDevice{}, bad("%s is %d", name, b[i])
		}
	}
	d := rankDevice{runs: true, occupancy: b[1] == 1, aligned: b[2] == 1}
	var w [rankDeviceWords]int64
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(b[3+8*i:]))
	}
	if err := checkRankDeviceWords(w, d.occupancy); err != nil {
		return rankDevice{}, bad("%v", err)
	}
	d.setWords(w)
	rest := b[head:]
	for _, f := range []struct {
		name string
		s    *string
		ok   func(string) bool
		want string
	}{
		{"device id", &d.id, isDeviceID, fmt.Sprintf("at most %d printable ASCII bytes", maxDeviceIDLen)},
		{"limiting kernel", &d.limiting, isKernelName, "a collective kernel's name or none"},
		{"aligned limiting kernel", &d.limitingAligned, isKernelName, "a collective kernel's name or none"},
	} {
		if len(rest) < 2 || len(rest) < 2+int(binary.LittleEndian.Uint16(rest)) {
			return rankDevice{}, bad("%s cut short", f.name)
		}
		n := int(binary.LittleEndian.Uint16(rest))
		*f.s, rest = string(rest[2:2+n]), rest[2+n:]
		if !f.ok(*f.s) {
			return rankDevice{}, bad("%s %.80q (want %s)", f.name, *f.s, f.want)
		}
	}
	if len(rest) > 0 {
		return rankDevice{}, bad("%d B past its end", len(rest))
	}
	return d, nil
}

// checkRankDeviceWords refuses figures (in words' order) no real device
// sends; occupancy is the description's flag (without the query a rank
// assumes one block per multiprocessor).
func checkRankDeviceWords(w [rankDeviceWords]int64, occupancy bool) error {
	names := [rankDeviceWords]string{"device ordinal", "blocks per multiprocessor", "multiprocessors", "aligned blocks per multiprocessor",
		"one-shot maximum", "AllGather copy-engine minimum", "AllToAll copy-engine minimum"}
	lo := [rankDeviceWords]int64{0, 0, 1, 0, 0, 0, 0}
	hi := [rankDeviceWords]int64{maxDeviceOrdinal - 1, maxBlocksPerSM, maxMultiprocessors, maxBlocksPerSM, maxThresholdBytes, maxThresholdBytes, maxThresholdBytes}
	if !occupancy {
		lo[1], hi[1] = 1, 1
	}
	for i, v := range w {
		if v >= lo[i] && v <= hi[i] || i >= rankDeviceWords-copyOps && v == NoCopyEngine {
			continue
		}
		return fmt.Errorf("%s is %d (want %d to %d)", names[i], v, lo[i], hi[i])
	}
	return nil
}

// isDeviceID reports whether s can be a PCI bus id as a runtime writes
// it ("dddd:bb:dd.f"): at most maxDeviceIDLen printable ASCII bytes, so
// it goes into errors as it is.
func isDeviceID(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return len(s) <= maxDeviceIDLen
}

// isKernelName reports whether s is one of the module's kernels, or none.
func isKernelName(s string) bool { return s == "" || slices.Contains(kernels.Names, s) }

// coResidentGrid is the grid limit every rank computes from every rank's
// device: the least, over ranks whose collectives run, of its device's
// resident blocks divided by the ranks on that device, at most
// kernels.MaxBlocks. 0 is ErrNotCoResident naming the device.
func coResidentGrid(devs []rankDevice) (uint32, error) {
	limit, worst := kernels.MaxBlocks, -1
	sharing := make([]int, len(devs))
	for p, d := range devs {
		if !d.runs {
			continue
		}
		for _, e := range devs {
			if e.runs && (d.id == "" || e.id == "" || e.id == d.id) {
				sharing[p]++
			}
		}
		if l := d.resident() / sharing[p]; l < limit {
			limit, worst = l, p
		}
	}
	if limit > 0 || worst < 0 {
		return uint32(limit), nil
	}
	d := devs[worst]
	how := "cuOccupancyMaxActiveBlocksPerMultiprocessor / hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"
	if !d.occupancy {
		how = "assumed: the driver has no occupancy query"
	}
	name := d.id
	if name == "" {
		name = "(no bus id)"
	}
	return 0, fmt.Errorf("%w: device %d (%s) of rank %d: kernel %s fits %d block(s) per multiprocessor (%s) x %d multiprocessors = %d resident blocks, shared by %d rank(s): 0 blocks per rank",
		ErrNotCoResident, d.device, name, worst, d.limiting, d.perSM, how, d.sms, d.resident(), sharing[worst])
}

// grid is the blocks for work items of block threads each: at least 1,
// at most the heap's co-resident limit.
func (h *DeviceHeap) grid(items int64) uint32 { return h.gridUpTo(items, h.maxGrid) }

// gridUpTo is grid with limit in place of the heap's general one.
func (h *DeviceHeap) gridUpTo(items int64, limit uint32) uint32 {
	g := (items + int64(h.kern.block) - 1) / int64(h.kern.block)
	return uint32(max(1, min(g, int64(limit))))
}

// settleGrid decodes every rank's device from the confirm round and sets
// the heap's grid limit (only where this rank's collectives run).
func (h *DeviceHeap) settleGrid(payloads [][]byte) error {
	devs := make([]rankDevice, len(payloads))
	for p, b := range payloads {
		var err error
		if devs[p], err = decodeRankDevice(b); err != nil {
			return fmt.Errorf("rank %d's device: %w", p, err)
		}
	}
	g, err := coResidentGrid(devs)
	if err != nil {
		return err
	}
	h.maxGrid = g
	// Auto's crossover: the least any rank's device recorded (every rank
	// must resolve Auto alike; the signature carries the algorithm).
	h.oneShotMax = OneShotMaxBytes
	first := true
	for _, d := range devs {
		if d.runs && (first || d.oneShotMax < h.oneShotMax) {
			h.oneShotMax, first = max(0, d.oneShotMax), false
		}
	}
	h.copyMin = agreeCopyEngine(devs)
	// The aligned variants' own limit, where every rank maps every
	// allocation 16-aligned; 0 (none: the general kernels serve every
	// collective) otherwise, or where they leave a rank no block.
	h.maxGridAligned = 0
	views := make([]rankDevice, len(devs))
	for p, d := range devs {
		if d.runs && !d.aligned {
			return nil
		}
		views[p] = d.alignedView()
	}
	if ga, err := coResidentGrid(views); err == nil {
		h.maxGridAligned = ga
	}
	return nil
}

// peerAccess is d's driver.PeerAccess, looked through wrappers with an
// Inner() driver (alloctest.Spy), as DeviceRuns.
func peerAccess(d driver.Driver) (driver.PeerAccess, bool) {
	for {
		if pa, ok := d.(driver.PeerAccess); ok {
			return pa, true
		}
		w, ok := d.(interface{ Inner() driver.Driver })
		if !ok {
			return nil, false
		}
		d = w.Inner()
	}
}

// deviceOrdinal is this rank's device ordinal for the export message
// (-1: the driver cannot say, and no peer access is arranged for it).
func (h *DeviceHeap) deviceOrdinal() int { return ordinalOf(h.a.Driver()) }

// ordinalOf is d's device ordinal (driver.PeerAccess), -1 where it cannot
// say.
func ordinalOf(d driver.Driver) int {
	if pa, ok := peerAccess(d); ok {
		return pa.Device()
	}
	return -1
}

// enablePeer makes peer device dev reachable from this rank's device: it
// checks the pair can, then enables it (idempotent, device-wide). A pair
// that cannot is ErrNoPeerAccess naming both devices and ranks.
func (h *DeviceHeap) enablePeer(p, dev int) error {
	pa, ok := peerAccess(h.a.Driver())
	if !ok {
		return nil
	}
	me := pa.Device()
	can, err := pa.CanAccessPeer(dev)
	if err == nil && !can {
		err = errors.New("the runtime reports the pair cannot access each other")
	}
	if err == nil {
		err = pa.EnablePeerAccess(dev)
	}
	if err != nil {
		return fmt.Errorf("%w: rank %d on device %d cannot reach rank %d's heap on device %d: %w", ErrNoPeerAccess, h.rank, me, p, dev, err)
	}
	return nil
}

// Failures a rank's message carries by kind, so every rank's error
// matches the same sentinel (errors.Is), not only the failing rank's.
var carried = []error{ErrNoPeerAccess, ErrNotCoResident}

// carriedKind is the index+1 of the first of carried that err wraps, or 0.
func carriedKind(err error) byte {
	for i, c := range carried {
		if errors.Is(err, c) {
			return byte(i + 1)
		}
	}
	return 0
}

// carriedError is a peer's failure text that wraps the sentinel it
// carried.
type carriedError struct {
	text string
	kind error
}

func (e *carriedError) Error() string { return e.text }
func (e *carriedError) Unwrap() error { return e.kind }

// peerFailure is a peer's failure: its text, wrapping the sentinel of its
// kind (0: none).
func peerFailure(kind byte, text string) error {
	if kind == 0 || int(kind) > len(carried) {
		return errors.New(text)
	}
	return &carriedError{text: text, kind: carried[kind-1]}
}
