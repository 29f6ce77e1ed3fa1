package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Every device driver.ClassifySafety treats as recorded (documented capture
// safety: docs/capture-safety.md) has its raw table here, and the table
// names such a device.
func TestRecordedDevicesHaveTables(t *testing.T) {
	if len(driver.RecordedDevices) == 0 {
		t.Fatal("no recorded device")
	}
	for _, r := range driver.RecordedDevices {
		b, err := os.ReadFile(filepath.Join("testdata", r.Table))
		if err != nil {
			t.Fatalf("%s: %v", r.Table, err)
		}
		var head struct {
			GPU string `json:"gpu"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			t.Fatalf("%s: %v", r.Table, err)
		}
		if !strings.HasPrefix(head.GPU, r.NamePrefix) {
			t.Errorf("%s records %q, not a %q", r.Table, head.GPU, r.NamePrefix)
		}
	}
}
