package symheap

import (
	"encoding/binary"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// heapExport is what a rank tells the others of its heap in the open's
// first round (OpenDevice): everything a peer needs to map it.
type heapExport struct {
	size   int64            // heap bytes (the pad not counted)
	token  [16]byte         // its process (processToken)
	memID  uint64           // its allocation's id in that process (devMem)
	base   driver.DevicePtr // the allocation's address in that process
	device int              // its device ordinal there (-1: the driver cannot say)
	handle []byte           // the allocation's IPC memory handle
}

// exportHeader is the bytes before the handle: size, token, id, base,
// device ordinal.
const exportHeader = 8 + 16 + 8 + 8 + 8

// maxIPCHandle bounds a handle's length (CUDA's and HIP's are 64 B);
// checkExports then holds a peer's to this rank's own driver's.
const maxIPCHandle = 1 << 10

func (e heapExport) encode() []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, exportHeader+len(e.handle)), uint64(e.size))
	b = append(b, e.token[:]...)
	b = binary.LittleEndian.AppendUint64(b, e.memID)
	b = binary.LittleEndian.AppendUint64(b, uint64(e.base))
	b = binary.LittleEndian.AppendUint64(b, uint64(int64(e.device)))
	return append(b, e.handle...)
}

// check refuses figures no rank sends: a heap of no bytes, a device
// ordinal below -1 or past maxDeviceOrdinal, no handle or one past
// maxIPCHandle. What a figure must match (this rank's size and handle
// length, this process's allocations) checkExports checks.
func (e heapExport) check() error {
	if e.size <= 0 {
		return fmt.Errorf("a heap of %d B", e.size)
	}
	if err := checkOrdinal(int64(e.device)); err != nil {
		return err
	}
	if len(e.handle) == 0 || len(e.handle) > maxIPCHandle {
		return fmt.Errorf("an IPC handle of %d B (want 1 to %d)", len(e.handle), maxIPCHandle)
	}
	return nil
}

// decodeExport decodes an export message (heapExport.encode) and checks
// its figures (heapExport.check). The handle is copied: the message is
// not held.
func decodeExport(m []byte) (heapExport, error) {
	if len(m) < exportHeader {
		return heapExport{}, fmt.Errorf("%d B, shorter than its %d B header", len(m), exportHeader)
	}
	le := binary.LittleEndian
	e := heapExport{size: int64(le.Uint64(m)), token: [16]byte(m[8:24]), memID: le.Uint64(m[24:]),
		base: driver.DevicePtr(le.Uint64(m[32:])), handle: append([]byte(nil), m[exportHeader:]...)}
	dev := int64(le.Uint64(m[40:]))
	if err := checkOrdinal(dev); err != nil { // before int(dev) could wrap it into range
		return heapExport{}, err
	}
	e.device = int(dev)
	if err := e.check(); err != nil {
		return heapExport{}, err
	}
	return e, nil
}

// checkOrdinal refuses an export's device ordinal below -1 (unknown) or
// past maxDeviceOrdinal.
func checkOrdinal(dev int64) error {
	if dev < -1 || dev >= maxDeviceOrdinal {
		return fmt.Errorf("device ordinal %d (want -1 to %d)", dev, maxDeviceOrdinal-1)
	}
	return nil
}
