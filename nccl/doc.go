// Package nccl runs NCCL's collectives on capalloc allocators' streams, so
// a capture records them with the rest of an engine's step (NCCL
// collectives are capturable since 2.9). The library is loaded at run time
// with purego (no cgo); a missing or too old one is an
// driver.ErrBackendUnavailable that names every path tried.
//
// RCCL, AMD's build of the same API for HIP, loads with LoadRCCL (2.13.4
// or later, the first that captures collectives into hipGraphs without an
// opt-in variable); LoadFor picks by driver name ("cuda": NCCL, "hip":
// RCCL). The two are told apart by ncclAllToAllv, which only RCCL exports:
// asking for one and finding the other is ErrWrongLibrary. An RCCL
// communicator's device-wide calls are guarded in the hip driver's capture
// domain, NCCL's in the cuda driver's; RCCL runs on *hip.Driver's streams
// and device thread (hip.Driver.OnDevice). Nothing here has run against a
// real RCCL: only against the stand-in built as RCCL (testdata).
//
// Every collective goes through Allocator.Enqueue: made at once with no
// capture, recorded (its buffers held by the graph) in the allocator's own
// capture, refused during any other. Communicator creation and destruction
// are device-wide calls made under alloc's guard (driver.DeviceWide): never
// during a Global-mode capture.
//
// Signatures and enum values are NCCL's (nccl.h; docs.nvidia.com/deeplearning/nccl,
// "API: Types" and "Collective Communication Functions"):
//
//	ncclResult_t ncclGetVersion(int *version)
//	const char *ncclGetErrorString(ncclResult_t result)
//	ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
//	ncclResult_t ncclCommDestroy(ncclComm_t comm)
//	ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
//	    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
//	ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
//	    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
//	ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
//	    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
//	ncclResult_t ncclGroupStart(void), ncclGroupEnd(void)
//	ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
//	    int peer, ncclComm_t comm, cudaStream_t stream)
//	ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
//	    int peer, ncclComm_t comm, cudaStream_t stream)
//
//	ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
//	ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
//
// ncclUniqueId is typedef struct { char internal[128]; }: passed by value,
// on the stack on amd64 and as a pointer to a caller's copy on arm64;
// purego's RegisterFunc lays it out per ABI (checked on amd64 against a
// stand-in library, testdata/fakenccl.c). Ranks in several processes or
// machines find each other through the torchrun environment (InitFromEnv:
// MASTER_ADDR and MASTER_PORT become NCCL_COMM_ID) or a file rendezvous
// (InitFromFile); ncclCommInitRank runs on the rank's device thread
// (DeviceRunner, *cuda.Driver's OnDevice), since it acts on the calling
// thread's current device.
//
// Point-to-point and rooted collectives (p2p.go): Send, Recv, Broadcast
// and Reduce, through Enqueue like the others. Under the allocator's
// capture each is recorded as a graph node on the capturing stream (NCCL
// captures them since 2.9; RCCL since 2.13.4) and runs at every replay,
// its buffers held by the graph.
//
//	ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
//	    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
//	ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
//	    ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
//
// Groups (group.go): Library.Group(fn) runs fn between ncclGroupStart and
// ncclGroupEnd on the caller's goroutine, locked to its OS thread, because
// NCCL keeps group state per thread; operations fn makes join the group
// (under capture they are recorded where made, and ncclGroupEnd launches
// them into the graph). An error or a panic in fn still ends the group.
//
// Split communicators (split.go; NCCL 2.18, optional, ErrNoSplit without):
//
//	ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
//	    ncclComm_t *newcomm, ncclConfig_t *config)   // config NULL: inherit the parent's
//	ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
//	ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
//
// Comm.Split is device-wide like InitRank: refused with no call during a
// Global-mode capture; never recorded.
//
// No hang (watch.go): every call on a communicator is made on the caller's
// thread with a timer at its deadline (the allocator's watchdog timeout,
// alloc.Options.Watchdog, for enqueued calls and a group's end; the
// communicator's own, Comm.SetTimeout, for Split and Destroy). At the
// deadline the communicator is aborted, which makes a call blocked in
// NCCL return, and the caller gets ErrCollectiveTimeout (symheap's
// sentinel) naming the call and the communicator. A call that returns
// ncclInProgress is settled by polling ncclCommGetAsyncError under the
// same deadline; Comm.Wait polls the stream and the async error under the
// allocator's watchdog and aborts on an asynchronous error or the
// deadline. An aborted communicator refuses every later call with
// ErrCommAborted and never calls NCCL again (Destroy returns nil: the
// abort freed it).
//
//	ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
//	ncclResult_t ncclCommAbort(ncclComm_t comm)
//
// Configured communicators (config.go; Library.InitRankConfig,
// Comm.SplitConfig): a Config is passed as an ncclConfig_t, so nonblocking
// mode and the CTA limits are per communicator (NCCL_COMM_BLOCKING,
// NCCL_MIN_CTAS, NCCL_MAX_CTAS are process-wide, and override a config
// when set). ABI facts, from NVIDIA/nccl's src/nccl.h.in and src/init.cc
// at the tags named (read in the repository, v2.14.3-1 to v2.30.7-1), and
// ROCm/rccl's at rocm-5.5.0 to its 2.21.5 sources:
//
//	ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
//	    ncclUniqueId commId, int rank, ncclConfig_t *config)   // 2.14 (v2.14.3-1)
//	#define NCCL_CONFIG_UNDEF_INT INT_MIN                        // 2.17
//	#define NCCL_CONFIG_UNDEF_PTR NULL
//	#define NCCL_API_MAGIC 0xcafebeef     // 2.29's name; the literal before
//	#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000+(Y)*100+(Z) : (X)*10000+(Y)*100+(Z))
//	typedef struct ncclConfig_v21700 {   // v2.17.1-1
//	  size_t size; unsigned int magic; unsigned int version;
//	  int blocking; int cgaClusterSize; int minCTAs; int maxCTAs;
//	  const char *netName;
//	} ncclConfig_t;
//	// NCCL_CONFIG_INITIALIZER: { sizeof(ncclConfig_t), 0xcafebeef,
//	//   NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), then UNDEF for each field }
//
// Fields appended since: 2.14 (ncclConfig_v21400) has blocking only, its
// initializer 1; 2.17 adds cgaClusterSize, minCTAs, maxCTAs, netName;
// 2.18 splitShare; 2.26 trafficClass (v2.26.2-1; parsed from version
// 2.25); 2.27 commName, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs
// (ncclConfig_v22700); 2.28 nChannelsPerNetPeer, nvlinkCentricSched
// (ncclConfig_v22800); 2.29 graphUsageMode, numRmaCtx; 2.30 maxP2pPeers,
// then graphStreamOrdering (v2.30.7-1, ncclConfig_v23000).
//
// We bind 2.17's layout (40 bytes on amd64 and arm64) and pass size 40,
// the magic and version 21700 (NCCL_VERSION(2,17,0)). Why every release
// from 2.14 accepts it: each copies min(size, its own
// sizeof(ncclConfig_t)) bytes over its NCCL_CONFIG_INITIALIZER and refuses
// a magic other than 0xcafebeef (ncclInvalidArgument): 2.14 to 2.16 in
// ncclCommInitRankConfig, 2.17 on in parseCommConfig (init.cc), which
// also resets to its default each field newer than the config's version (version <
// NCCL_VERSION(2,17,0): the 2.17 fields; < 2.25: trafficClass; < 2.27,
// 2.28, 2.29, 2.30, 2.30.5: theirs). So a newer library reads our 40
// bytes, keeps the 2.17 fields (version 21700) and takes every field past
// them from its own initializer (unset); 2.14 to 2.16 read size, magic,
// version and blocking (24 bytes) and ignore the rest, which this package
// refuses to set there (ErrNoConfig). Checks copied from parseCommConfig
// (2.17.1 and 2.30.7 alike): blocking UNDEF, 0 or 1 (2.14 to 2.16: 0 or 1
// only, so an unset Blocking is passed as 1 there); cgaClusterSize UNDEF
// or >= 0; minCTAs and maxCTAs UNDEF or > 0, and minCTAs > maxCTAs refused
// comparing the raw values, so a minimum with the maximum unset (INT_MIN)
// is refused; values above MAXCHANNELS (32 in 2.17, 64 in 2.30; RCCL 32 at
// rocm-5.7.0, 128 at 2.21.5) are lowered to it with a warning; netName is
// copied during the call. NCCL_MAX_CGA_CLUSTER_SIZE is 8. RCCL: the same
// header and checks (ncclConfig_v21700, magic 0xcafebeef, NCCL_VERSION as
// above); ncclCommInitRankConfig from RCCL 2.15.5 (rocm-5.5.0, the 2.14
// struct), the 2.17 layout from RCCL 2.17.1 (rocm-5.7.0); RCCL 2.13.4
// (rocm-5.4.0, MinRCCLVersion) has none.
//
// ncclCommInitRankConfig takes the unique id by value, so it is declared to
// purego's RegisterFunc like ncclCommInitRank (amd64 and arm64 only), and
// resolved with Dlsym as optional (HasConfig; ErrNoConfig without it). In
// nonblocking mode NCCL writes *comm before returning ncclInProgress and
// completes the init in the background (init.cc, ncclCommInitRankDev);
// for a split it writes *newcomm only when the split completes, from its
// thread, and reports progress on the parent (ncclCommInitChildComm runs
// the job in the parent's group). So both calls are watched: polled with
// ncclCommGetAsyncError until settled, under the deadline (Config.Timeout
// for an init, the parent's for a split), the handle slot on the heap
// until then; at the deadline the communicator (or the parent) is aborted
// and a communicator made past it is aborted too, never handed out. Split
// still passes a NULL config (inherit the parent's). During a capture a
// timeout still aborts the communicator; the capture fails with the call's
// error.
//
// Symmetric windows (NCCL 2.27; window.go): ncclMemAlloc memory registered
// with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), optional symbols
// resolved when present (Library.HasWindows); Comm.NewWindow is refused
// during a Global-mode capture like InitRank, and AllReduceWindow runs on
// an allocator's stream through Enqueue.
package nccl
