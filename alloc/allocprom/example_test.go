package allocprom_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocprom"
	"github.com/capalloc/capalloc/cpu"
)

// The collector registered once; every scrape then reads every open
// allocator, labelled with its name. Here a registry is gathered directly,
// as promhttp does for a Prometheus server's scrape.
func ExampleNewCollector() {
	reg := prometheus.NewRegistry() // an engine: prometheus.MustRegister(allocprom.NewCollector())
	reg.MustRegister(allocprom.NewCollector())

	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{Name: "example-prom"})
	defer a.Close()
	b, _ := a.Alloc(3 << 20)
	defer a.Free(b)

	fams, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range fams {
		if f.GetName() != "capalloc_in_use_bytes" && f.GetName() != "capalloc_allocs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "allocator" && l.GetValue() == "example-prom" {
					fmt.Printf("%s %.0f\n", f.GetName(), m.GetGauge().GetValue()+m.GetCounter().GetValue())
				}
			}
		}
	}
	// Output:
	// capalloc_allocs_total 1
	// capalloc_in_use_bytes 3145728
}
