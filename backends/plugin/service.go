package plugin

import (
	"context"
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/capalloc/capalloc/backends"
)

// The service is one unary method carrying an opcode, described by hand
// (no protoc): the driver's calls are small and the dispatch is a switch.

type opcode byte

const (
	opOpen opcode = iota + 1
	opClose
	opCreateStream
	opDestroyStream
	opStreamSynchronize
	opStreamQuery
	opStreamCaptureStatus
	opMalloc
	opFree
	opMallocAsync
	opFreeAsync
	opHostAlloc
	opHostFree
	opStagingAlloc
	opStagingFree
	opCopyHtoDAsync
	opCopyDtoHAsync
	opCopyDtoDAsync
	opMemsetAsync
	opCopyHtoD
	opCopyDtoH
	opBeginCapture
	opEndCapture
	opGraphInstantiate
	opGraphLaunch
	opGraphExecDestroy
	opGraphDestroy
	opUsage
	opDirectSpan
	opDirectDone
	opBatch // pipelined operations, then optionally one call (host_pipeline.go)
	opMemInfo
	numOps
)

var opNames = [numOps]string{
	opOpen: "Open", opClose: "Close", opCreateStream: "CreateStream", opDestroyStream: "DestroyStream",
	opStreamSynchronize: "StreamSynchronize", opStreamQuery: "StreamQuery", opStreamCaptureStatus: "StreamCaptureStatus",
	opMalloc: "Malloc", opFree: "Free", opMallocAsync: "MallocAsync", opFreeAsync: "FreeAsync",
	opHostAlloc: "HostAlloc", opHostFree: "HostFree", opStagingAlloc: "StagingAlloc", opStagingFree: "StagingFree",
	opCopyHtoDAsync: "CopyHtoDAsync", opCopyDtoHAsync: "CopyDtoHAsync", opCopyDtoDAsync: "CopyDtoDAsync",
	opMemsetAsync: "MemsetAsync", opCopyHtoD: "CopyHtoD", opCopyDtoH: "CopyDtoH", opBeginCapture: "BeginCapture",
	opEndCapture: "EndCapture", opGraphInstantiate: "GraphInstantiate", opGraphLaunch: "GraphLaunch",
	opGraphExecDestroy: "GraphExecDestroy", opGraphDestroy: "GraphDestroy", opUsage: "Usage",
	opDirectSpan: "DirectSpan", opDirectDone: "DirectDone", opBatch: "Batch", opMemInfo: "MemInfo",
}

func (o opcode) String() string {
	if o > 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", byte(o))
}

const (
	serviceName = "capalloc.plugin.Driver"
	callMethod  = "/" + serviceName + "/Call"
	codecName   = "capalloc"
	pluginName  = "driver"
	// maxMsg raises gRPC's 4 MiB receive limit. Messages stay tiny (bulk
	// data goes through shared memory); this is headroom, not a channel.
	maxMsg = 16 << 20
)

var (
	errInvalidConfig  = backends.ErrInvalidConfig
	errUnknownBackend = backends.ErrUnknownBackend
)

// Handshake is the go-plugin handshake: a host only runs binaries that
// answer it, and a plugin binary started by hand says so and exits.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "CAPALLOC_PLUGIN_COOKIE",
	MagicCookieValue: "7c1d0a4e-capalloc-driver",
}

// codec passes msg bytes through; it is selected per call by content
// subtype, so go-plugin's own protobuf services are untouched.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*msg)
	if !ok {
		return nil, fmt.Errorf("capalloc codec: cannot marshal %T", v)
	}
	return m.b, nil
}

func (codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*msg)
	if !ok {
		return fmt.Errorf("capalloc codec: cannot unmarshal into %T", v)
	}
	m.b = append(m.b[:0], data...) // gRPC may reuse data after we return
	return nil
}

func init() { encoding.RegisterCodec(codec{}) }

// handler is the service's implementation (the child's server).
type handler interface {
	call(ctx context.Context, req []byte) []byte
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*handler)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, decode func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(msg)
			if err := decode(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return &msg{b: srv.(handler).call(ctx, req.(*msg).b)}, nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: callMethod}, h)
		},
	}},
	Metadata: "capalloc/plugin",
}

// grpcPlugin plugs the service into go-plugin: the child registers the
// server, the host gets the connection and calls it directly.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	srv handler // child side only
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}
