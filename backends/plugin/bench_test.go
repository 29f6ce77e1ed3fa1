package plugin

import (
	"context"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// The baseline for a round trip: go-plugin and gRPC with nothing of ours,
// an empty method with protobuf's Empty, served by the same child.

type bareServer struct{}

var bareDesc = grpc.ServiceDesc{
	ServiceName: "capalloc.bench.Bare",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Empty",
		Handler: func(_ any, ctx context.Context, decode func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := decode(in); err != nil {
				return nil, err
			}
			return &emptypb.Empty{}, nil
		},
	}},
}

type barePlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (barePlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&bareDesc, bareServer{})
	return nil
}

func (barePlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}

func init() { extraPlugins = goplugin.PluginSet{"bare": barePlugin{}} }

func benchDriver(b *testing.B, cfg string) driver.Driver {
	b.Helper()
	d, err := backends.OpenDriver(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func hostOf(d driver.Driver) *Driver { return d.(*Driver) }

func BenchmarkRoundTrip(b *testing.B) {
	b.Run("impl=bare-go-plugin", func(b *testing.B) {
		d := hostOf(benchDriver(b, "plugin:cpu"))
		rpc, err := d.client.Client()
		if err != nil {
			b.Fatal(err)
		}
		raw, err := rpc.Dispense("bare")
		if err != nil {
			b.Fatal(err)
		}
		conn := raw.(*grpc.ClientConn)
		in, out := &emptypb.Empty{}, &emptypb.Empty{}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := conn.Invoke(context.Background(), "/capalloc.bench.Bare/Empty", in, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A round trip of ours: StreamQuery of an idle stream.
	// (StreamCaptureStatus is answered by the host itself: its row
	// measures the local answer.)
	for _, call := range []struct {
		name string
		fn   func(driver.Driver, driver.Stream) error
	}{
		{"StreamQuery", func(d driver.Driver, s driver.Stream) error { _, err := d.StreamQuery(s); return err }},
		{"StreamCaptureStatus", func(d driver.Driver, s driver.Stream) error { _, err := d.StreamCaptureStatus(s); return err }},
	} {
		b.Run("impl=plugin-"+call.name, func(b *testing.B) {
			d := benchDriver(b, "plugin:cpu")
			s, err := d.CreateStream()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := call.fn(d, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const benchBytes = 64 << 20

var sink []byte

func BenchmarkTransfer(b *testing.B) {
	b.Run("impl=copy", func(b *testing.B) {
		src, dst := pattern(benchBytes, 1), pattern(benchBytes, 2) // both touched
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			copy(dst, src)
		}
		sink = dst
	})
	for _, cfg := range []string{"cpu", "plugin:cpu"} {
		name := "backend=" + cfg
		setup := func(b *testing.B) (*alloc.Allocator, alloc.Buffer) {
			d := benchDriver(b, cfg+":memory_limit=1GiB")
			a, err := alloc.New(d, alloc.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = a.Close() })
			buf, err := a.Alloc(benchBytes)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = a.Free(buf) })
			// One untimed round trip first: fresh shared memory faults its
			// pages in on first touch, in the backend and in this process's
			// mapping, which is not the transfer's cost (issue 12).
			warm := pattern(benchBytes, 3)
			if err := a.Upload(buf, 0, warm); err != nil {
				b.Fatal(err)
			}
			if err := a.Download(warm, buf, 0); err != nil {
				b.Fatal(err)
			}
			return a, buf
		}
		// Each op, timed: a copy from or to pageable memory (src, touched:
		// never-written memory reads the zero page), or from or to a
		// pinned buffer with its synchronize.
		for _, op := range []struct {
			name   string
			pinned bool
			copy   func(a *alloc.Allocator, buf alloc.Buffer, src []byte, h *alloc.HostBuffer) error
		}{
			{"upload-pageable", false, func(a *alloc.Allocator, buf alloc.Buffer, src []byte, _ *alloc.HostBuffer) error {
				return a.Upload(buf, 0, src)
			}},
			{"download-pageable", false, func(a *alloc.Allocator, buf alloc.Buffer, src []byte, _ *alloc.HostBuffer) error {
				return a.Download(src, buf, 0)
			}},
			{"upload-pinned", true, func(a *alloc.Allocator, buf alloc.Buffer, _ []byte, h *alloc.HostBuffer) error {
				return a.UploadHost(buf, 0, h, 0, benchBytes)
			}},
			{"download-pinned", true, func(a *alloc.Allocator, buf alloc.Buffer, _ []byte, h *alloc.HostBuffer) error {
				return a.DownloadHost(h, 0, buf, 0, benchBytes)
			}},
		} {
			b.Run(name+"/op="+op.name, func(b *testing.B) {
				a, buf := setup(b)
				src := pattern(benchBytes, 1)
				var h *alloc.HostBuffer
				if op.pinned {
					var err error
					if h, err = a.HostAlloc(benchBytes); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = h.Close() })
					copy(h.Bytes(), src)
					warmPinned(b, a, buf, h)
				}
				b.SetBytes(benchBytes)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := op.copy(a, buf, src, h); err != nil {
						b.Fatal(err)
					}
					if op.pinned {
						if err := a.Synchronize(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// warmPinned makes one untimed pinned round trip. Through a plugin, the
// pinned copies run in the backend's process, whose own mappings of the
// host buffer and of the device memory are faulted in on first touch there;
// the pageable warm-up in setup touches only this process's mappings, so
// without this the first timed iteration paid about 16,000 page faults
// (issue 23, item 3).
func warmPinned(b *testing.B, a *alloc.Allocator, buf alloc.Buffer, h *alloc.HostBuffer) {
	b.Helper()
	if err := a.UploadHost(buf, 0, h, 0, benchBytes); err != nil {
		b.Fatal(err)
	}
	if err := a.DownloadHost(h, 0, buf, 0, benchBytes); err != nil {
		b.Fatal(err)
	}
	if err := a.Synchronize(); err != nil {
		b.Fatal(err)
	}
}
