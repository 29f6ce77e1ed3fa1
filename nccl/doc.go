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
// Communicators are made blocking (ncclCommInitRank, no ncclConfig_t):
// ncclConfig_t is a versioned struct (size, magic 0xcafebeef, version,
// then fields appended release by release) whose layout this package does
// not bind, so it does not pass one. A nonblocking communicator is had
// with NCCL's NCCL_COMM_BLOCKING=0 environment variable, and its
// ncclInProgress results are handled as above. During a capture a timeout
// still aborts the communicator; the capture fails with the call's error.
//
// Symmetric windows (NCCL 2.27; window.go): ncclMemAlloc memory registered
// with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), optional symbols
// resolved when present (Library.HasWindows); Comm.NewWindow is refused
// during a Global-mode capture like InitRank, and AllReduceWindow runs on
// an allocator's stream through Enqueue.
package nccl
