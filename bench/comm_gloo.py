#!/usr/bin/env python3
"""Baseline for bench/comm.c: torch.distributed's Gloo all-reduce (fp32 sum)
between processes on loopback, over the same sizes. Prints one line per
size for the C bench to parse:
    gloo allreduce bytes=<n> us=<mean microseconds per call>
"""
import argparse
import os
import socket
import sys
import time


def iters_for(nbytes, quick):
    # The same budget as bench/comm.c's iters_for().
    budget = (32 if quick else 128) << 20
    return max(2 if quick else 3, min(200, budget // max(nbytes, 1)))


def worker(rank, world, port, sizes, quick, rounds):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32)
        n = iters_for(nbytes, quick)
        for _ in range(2):
            dist.all_reduce(x)
        best = None
        for _ in range(rounds):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(x)
            dt = (time.perf_counter() - t0) / n
            # The slowest rank's time is the collective's time; keep the best round.
            t = torch.tensor([dt], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best = t.item() if best is None else min(best, t.item())
        if rank == 0:
            print(f"gloo allreduce bytes={nbytes} us={best * 1e6:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", required=True, help="comma-separated byte counts")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="keep the best round's mean")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"gloo unavailable: {e}", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(a.ranks, port, sizes, a.quick, max(1, a.rounds)), nprocs=a.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
