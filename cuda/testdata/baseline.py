"""Baselines for cuda/bench_test.go, run on the GPU machine:

    python3 cuda/testdata/baseline.py [--rounds 7] [--only replay_axpy]

PyTorch's caching allocator and CuPy's pools for an allocate+free pair,
torch copy_ between pinned host memory and the device for 64 MiB, and 1,000
small device ops eager vs replayed as a torch CUDA graph, and 1,000 axpy
kernels (y += x over 4096 float32, as examples/decodeloop -kernels=1000)
eager vs replayed. Each figure is the
median of --rounds timed rounds after a warm-up round; one line per figure,
in Go's benchmark format, so benchstat reads both outputs.
"""
import argparse
import statistics
import time

import torch

SIZES = [("256B", 256), ("64KiB", 64 << 10), ("4MiB", 4 << 20), ("256MiB", 256 << 20)]


def median_ns(fn, n, rounds):
    fn(n)  # warm-up
    out = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        fn(n)
        out.append((time.perf_counter_ns() - t) / n)
    return statistics.median(out)


def line(name, n, ns, extra=""):
    print(f"Benchmark{name}\t{n}\t{ns:.1f} ns/op{extra}", flush=True)


def torch_pair(size):
    def run(n):
        for _ in range(n):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            del t
    return run


def cupy_pair(pool_kind, size):
    import cupy
    if pool_kind == "MemoryPool":
        cupy.cuda.set_allocator(cupy.cuda.MemoryPool().malloc)
    else:
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)

    def run(n):
        for _ in range(n):
            m = cupy.cuda.alloc(size)
            del m
    return run


def transfer(direction, rounds):
    n = 64 << 20
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(n, dtype=torch.uint8, device="cuda")

    def run(k):
        for _ in range(k):
            if direction == "upload":
                d.copy_(h, non_blocking=True)
            else:
                h.copy_(d, non_blocking=True)
            torch.cuda.synchronize()
    k = 20
    ns = median_ns(run, k, rounds)
    mbs = n / (ns / 1e9) / 1e6
    line(f"TorchTransfer64MiB/dir={direction}", k, ns, f"\t{mbs:.2f} MB/s")


def graph_vs_eager(name, work, rounds):
    """Times work() eager (then a synchronize) and replayed as one CUDA
    graph captured on a side stream, as PyTorch's docs do."""
    def eager(k):
        for _ in range(k):
            work()
            torch.cuda.synchronize()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        work()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        work()

    def graph(k):
        for _ in range(k):
            g.replay()
            torch.cuda.synchronize()
    line(f"{name}/impl=eager", 20, median_ns(eager, 20, rounds))
    line(f"{name}/impl=graph", 200, median_ns(graph, 200, rounds))


def replay(rounds):
    ops = 1000
    x = torch.empty(4096, dtype=torch.uint8, device="cuda")
    y = torch.empty(4096, dtype=torch.uint8, device="cuda")

    def work():
        for i in range(ops // 2):
            x.fill_(i & 0xFF)
            y.copy_(x)
    graph_vs_eager(f"TorchReplay/ops={ops}", work, rounds)


def replay_axpy(rounds):
    """The same step as examples/decodeloop -kernels=1000: y = 1*x + y over
    4096 float32, 1,000 kernels, eager vs one CUDA graph."""
    ops = 1000
    x = torch.ones(4096, dtype=torch.float32, device="cuda")
    y = torch.zeros(4096, dtype=torch.float32, device="cuda")

    def work():
        for _ in range(ops):
            y.add_(x, alpha=1.0)
    graph_vs_eager(f"TorchReplayAxpy/kernels={ops}", work, rounds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", choices=["replay_axpy"], help="run this figure alone (the GPU kit's decodeloop step)")
    a = ap.parse_args()
    torch.cuda.init()
    print(f"# torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name()}", flush=True)
    if a.only == "replay_axpy":
        replay_axpy(a.rounds)
        return
    for name, size in SIZES:
        line(f"TorchAllocFree/size={name}", 20000, median_ns(torch_pair(size), 20000, a.rounds))
    try:
        import cupy
        print(f"# cupy {cupy.__version__} runtime {cupy.cuda.runtime.runtimeGetVersion()} driver {cupy.cuda.runtime.driverGetVersion()}", flush=True)
        for kind in ("MemoryPool", "MemoryAsyncPool"):
            for name, size in SIZES:
                line(f"CupyAllocFree/pool={kind}/size={name}", 20000, median_ns(cupy_pair(kind, size), 20000, a.rounds))
    except Exception as e:  # report, keep the torch figures
        print(f"# cupy failed: {e!r}", flush=True)
    for d in ("upload", "download"):
        transfer(d, a.rounds)
    replay(a.rounds)
    replay_axpy(a.rounds)


if __name__ == "__main__":
    main()
