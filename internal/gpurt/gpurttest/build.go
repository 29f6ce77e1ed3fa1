package gpurttest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The fake runtimes run the library's own kernels: each is its vendor's C
// front (on the shared core internal/fakegpu/core.c) linked with the host
// build of internal/kernels/collectives.cu (C++). Commands gives the
// compiler command lines, so every place that builds a fake (the tests
// here, cmd/cudatruth's, .ci/run, the docs) builds the same thing; by
// hand:
//
//	g++ -std=c++17 -O1 -fPIC -c -o kernels.o -x c++ internal/kernels/collectives.cu
//	gcc -shared -fPIC -O1 -I internal/fakegpu -o libcudart.so -x c cuda/testdata/fakecudart.c -x none kernels.o -lstdc++ -lpthread

// KernelsSrc is the kernels' source, relative to the module root (it
// includes compat.h from its folder).
const KernelsSrc = "internal/kernels/collectives.cu"

// kernelFlags compile the kernels for the host (compat.h's host branch:
// every block a worker thread, its threads fibers).
var kernelFlags = []string{"-std=c++17", "-O1", "-fPIC"}

// CXX is the C++ compiler for the kernels: $CXX, else the C++ driver of
// CC() (aarch64-linux-gnu-gcc gives aarch64-linux-gnu-g++), else g++.
func CXX() string {
	if cxx := os.Getenv("CXX"); cxx != "" {
		return cxx
	}
	cc := CC()
	for _, p := range []struct{ c, cxx string }{{"gcc", "g++"}, {"clang", "clang++"}} {
		if base, ok := strings.CutSuffix(cc, p.c); ok {
			return base + p.cxx
		}
	}
	return "g++"
}

// Commands are the command lines that build the fake whose front is the C
// file front into the shared library out, under the module root root:
// first the kernels into the object obj (needed once per source and
// compiler), then the library from front (with cflags) and obj.
func Commands(root, front, out, obj string, cflags ...string) (kernels, link []string) {
	kernels = append([]string{CXX()}, kernelFlags...)
	kernels = append(kernels, "-c", "-o", obj, "-x", "c++", filepath.Join(root, KernelsSrc))
	link = []string{CC(), "-shared", "-fPIC", "-I", filepath.Join(root, "internal", "fakegpu"), "-o", out}
	link = append(link, cflags...)
	link = append(link, "-x", "c", front, "-x", "none", obj, "-lstdc++", "-lpthread")
	return kernels, link
}

// BuildFake builds the fake whose front is the C file front (a path) into
// out, with cflags for the front. The kernels' object is compiled once
// for a given source, compiler and flags, and kept in the user's cache
// directory (a temporary one without it).
func BuildFake(front, out string, cflags ...string) error {
	root, err := rootAbove(filepath.Dir(front))
	if err != nil {
		return err
	}
	obj, err := kernelObject(root)
	if err != nil {
		return err
	}
	_, link := Commands(root, front, out, obj, cflags...)
	return run(link)
}

// kernelObject compiles the kernels unless their object is already in the
// cache, and returns its path. The name is a hash of what goes into it;
// it is written under a temporary name and renamed, so concurrent test
// processes never see half an object.
func kernelObject(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, CXX(), kernelFlags)
	for _, f := range []string{KernelsSrc, "internal/kernels/compat.h"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "capalloc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	obj := filepath.Join(dir, "fakekernels-"+hex.EncodeToString(h.Sum(nil))[:16]+".o")
	if _, err := os.Stat(obj); err == nil {
		return obj, nil
	}
	tmp, err := os.CreateTemp(dir, "fakekernels-*.o")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	kernels, _ := Commands(root, "", "", tmp.Name())
	if err := run(kernels); err != nil {
		return "", err
	}
	return obj, os.Rename(tmp.Name(), obj)
}

func run(argv []string) error {
	if msg, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, msg)
	}
	return nil
}

// rootAbove is the folder of go.mod at or above dir.
func rootAbove(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("gpurttest: no go.mod above the folder of the fake")
		}
		dir = up
	}
}
