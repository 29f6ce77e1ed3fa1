package symheap

import (
	"encoding/binary"
	"errors"
	"fmt"

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

func decodeRankDevice(b []byte) (rankDevice, error) {
	if len(b) == 0 {
		return rankDevice{}, nil
	}
	bad := fmt.Errorf("%w: a device description of %d B that does not parse", ErrPeerOpen, len(b))
	const head = 3 + 8*rankDeviceWords
	if len(b) < head || b[0] != 1 {
		return rankDevice{}, bad
	}
	d := rankDevice{runs: true, occupancy: b[1] == 1, aligned: b[2] == 1}
	var w [rankDeviceWords]int64
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(b[3+8*i:]))
	}
	d.setWords(w)
	b = b[head:]
	for _, s := range []*string{&d.id, &d.limiting, &d.limitingAligned} {
		if len(b) < 2 || len(b) < 2+int(binary.LittleEndian.Uint16(b)) {
			return rankDevice{}, bad
		}
		n := int(binary.LittleEndian.Uint16(b))
		*s, b = string(b[2:2+n]), b[2+n:]
	}
	return d, nil
}

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
func (h *DeviceHeap) deviceOrdinal() int {
	if pa, ok := peerAccess(h.a.Driver()); ok {
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
