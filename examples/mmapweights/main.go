// Command mmapweights loads a model's weights the way docs/host-memory.md
// says to on unified memory: it writes a small weights file, maps it
// (mmap, shared), gives the device the mapping with Allocator.Host().MapHost
// and captures a step that reads the weights; it replays the step after
// changing the weights through the mapping (the file's own bytes) and
// checks every output against the file.
//
// Where the device reads pageable host memory in place, through the
// host's page tables (DeviceInfo.ReadsHostInPlace: GB10, Grace Hopper;
// cpu:profile=gb10), MapHost makes no driver call and the step reads the
// weights in place: a kernel at HostBuffer.DevicePtr (cuda, hip), or on
// the cpu backend, whose device is the host, a captured host function
// standing in for it. Elsewhere, HMM's pageable access included (its
// reads may migrate the weights into device memory), MapHost registers
// the mapping and the step copies it with a captured UploadHost.
//
//	go run ./examples/mmapweights
//	go run ./examples/mmapweights -backend=cpu:profile=gb10
//
// The mapping needs Linux (syscall.Mmap, MAP_SHARED); elsewhere the
// command says so and exits.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/prog"
)

func main() {
	backend := prog.BackendFlag()
	replays := flag.Int("replays", 4, "replays of the captured step, the weights changed before each")
	floats := flag.Int("floats", 64<<10, "float32 weights in the file")
	flag.Parse()
	prog.ExitOnError("mmapweights", run(os.Stdout, *backend, *replays, *floats))
}

// weight is the file's i-th weight at version v (the file is rewritten
// through the mapping before each replay).
func weight(i, v int) float32 { return float32(i%1021) + float32(v)*0.5 }

// writeWeights fills b with version v's weights.
func writeWeights(b []byte, v int) {
	for i := range len(b) / 4 {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(weight(i, v)))
	}
}

func run(w io.Writer, backend string, replays, floats int) (err error) {
	if floats <= 0 || replays < 0 {
		return fmt.Errorf("-floats %d, -replays %d: want a positive count of weights and no negative replays", floats, replays)
	}
	n := 4 * floats
	dir, err := os.MkdirTemp("", "mmapweights")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "weights.bin")
	file := make([]byte, n)
	writeWeights(file, 0)
	if err := os.WriteFile(path, file, 0o600); err != nil {
		return err
	}
	m, unmap, err := mapFile(path, n)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, unmap()) }()

	opened, err := backends.OpenString(context.Background(), backend)
	if err != nil {
		return err
	}
	drv := opened.Driver
	defer func() { err = errors.Join(err, drv.Close()) }()
	a, err := alloc.New(drv, alloc.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	return runStep(w, a, path, m, replays)
}

// runStep maps m (the file at path), captures the step, and replays it,
// changing the weights through the mapping before each replay.
func runStep(w io.Writer, a *alloc.Allocator, path string, m []byte, replays int) (err error) {
	s, err := newStep(a, m)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, s.enqueue)
	if err != nil {
		return fmt.Errorf("capturing the step: %w", err)
	}
	defer func() { err = errors.Join(err, g.Close()) }()
	if g.Eager() {
		return fmt.Errorf("the backend refused the capture: %v", g.Warnings())
	}
	for v := range replays + 1 {
		if v > 0 {
			writeWeights(m, v) // through the mapping: the file's bytes
		}
		if err := errors.Join(g.Launch(), a.Synchronize()); err != nil {
			return fmt.Errorf("replay %d: %w", v, err)
		}
		if err := check(path, m, s.out.Bytes(), v); err != nil {
			return fmt.Errorf("replay %d: %w", v, err)
		}
	}
	fmt.Fprintf(w, "%d B of weights mapped on %s: %s; %d replays of one captured step, outputs checked against the file\n",
		len(m), a.Driver().Name(), s.how, replays+1)
	return nil
}

// check compares the step's output with the file as it now reads (the
// mapping is shared: the file holds what was written through it) and with
// version v's weights.
func check(path string, m, out []byte, v int) error {
	file, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i := range len(m) / 4 {
		want := weight(i, v)
		if f := math.Float32frombits(binary.LittleEndian.Uint32(file[4*i:])); f != want {
			return fmt.Errorf("the file's weight %d is %v, want %v: the mapping is not the file's", i, f, want)
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != want {
			return fmt.Errorf("output %d is %v, want %v (version %d): the step read stale weights", i, got, want, v)
		}
	}
	return nil
}
