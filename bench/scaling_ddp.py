"""PyTorch peer of bench/scaling's dp=2: DistributedDataParallel on Gloo,
WORLD processes on loopback, each torch.set_num_threads(1) (the caller sets
OPENBLAS_NUM_THREADS=1), each taking B / WORLD rows of the global batch.

Started by bench_scaling as:
  python3 scaling_ddp.py DIR B,T,V,C,NH,L WORLD
Loads Giant's weights and tokens from DIR (gpt_torch), prints "ready" (or
"unavailable: WHY" and exits), then answers commands on stdin:
  losses N  -> the global losses of N steps from the loaded weights
  tune N    -> times N steps twice under each DDP setting, one line each
               ("setting <name> ms=<ms/step>"), keeps the fastest and
               ends with "best <name>"
  time N    -> mean milliseconds per step over N steps (the slowest rank)
A step: zero grads, forward, backward (DDP's bucketed all-reduce
overlapping it), clip the global norm to 1.0, AdamW.
"""
import ctypes
import datetime
import os
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpt_torch  # noqa: E402

# The settings DDP offers for this model: bucket size (25 MB, its default,
# holds the whole model in one or two buckets) and gradients as views of
# the buckets (no copy in or out).
SETTINGS = [(25, False), (25, True), (4, True), (1, True)]


def setting_name(k):
    mb, view = SETTINGS[k]
    return f"bucket_cap_mb={mb},gradient_as_bucket_view={view}"


def worker(rank, world, port, d, shape, conn, parent):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Ends with its parent however the parent ends (bench_scaling kills a
    # parent that does not stop): a worker left behind would spin in Gloo.
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    s = gpt_torch.Shape(shape)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=5))
    rows = s.B // world
    idx, targets = gpt_torch.load_tokens(d, s)
    idx, targets = idx[rank * rows:(rank + 1) * rows], targets[rank * rows:(rank + 1) * rows]
    mask = gpt_torch.causal_mask(s)

    class GPT(torch.nn.Module):
        def __init__(self, params):
            super().__init__()
            self.names = list(params)
            for n, t in params.items():
                self.register_parameter(n.replace(".", "_"), torch.nn.Parameter(t.detach().clone()))

        def named(self):
            return [(n, getattr(self, n.replace(".", "_"))) for n in self.names]

        def forward(self, x, y):
            return gpt_torch.forward(dict(self.named()), x, y, s, mask)

    def build(params, k):
        model = GPT(params)
        mb, view = SETTINGS[k]
        ddp = DDP(model, bucket_cap_mb=mb, gradient_as_bucket_view=view)
        return model, ddp, gpt_torch.optimizer(model.named())

    model, ddp, opt = build(gpt_torch.load_params(d, s), 0)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    def timed(n):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        t = torch.tensor([(time.perf_counter() - t0) / n * 1e3], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    conn.send("ready")
    while True:
        try:
            cmd, n = conn.recv()
        except EOFError:  # the parent is gone
            cmd = "quit"
        if cmd == "quit":
            os._exit(0)  # no teardown of Gloo, nor of the interpreter
        if cmd == "losses":
            out = []
            for _ in range(n):
                loss = step()
                dist.all_reduce(loss)  # the replicas hold even shares: the mean of means
                out.append(loss.item() / world)
            conn.send(" ".join(f"{v:.8f}" for v in out))
        elif cmd == "tune":
            lines, best = [], None
            for k in range(len(SETTINGS)):
                params = {n: t.detach() for n, t in model.named()}
                cand = build(params, k)
                model, ddp, opt = cand
                step()  # warm-up: DDP's buckets are laid out on the first backward
                ms = min(timed(n), timed(n))  # the better of two: the machine is shared
                lines.append(f"setting {setting_name(k)} ms={ms:.3f}")
                if best is None or ms < best[0]:
                    best = (ms, k, cand)
            model, ddp, opt = best[2]
            lines.append(f"best {setting_name(best[1])}")
            conn.send("\n".join(lines))
        elif cmd == "time":
            conn.send(f"{timed(n):.3f}")


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def main():
    d, shape, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        import torch.distributed as dist
        import torch.multiprocessing as mp
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed with Gloo is not available")
    except ImportError as e:
        print(f"unavailable: {e}", flush=True)
        return
    ctx = mp.get_context("spawn")
    port = free_port()
    conns, procs = [], []
    for r in range(world):
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(r, world, port, d, shape, b, os.getpid()), daemon=True)
        p.start()
        conns.append(a)
        procs.append(p)
    try:
        for c in conns:
            c.recv()
    except EOFError:
        print("unavailable: a DDP worker did not start", flush=True)
        return
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, n = line.split()
        for c in conns:
            c.send((cmd, int(n)))
        answers = [c.recv() for c in conns]
        print(answers[0], flush=True)
    # The workers leave without tearing Gloo down: a peer that already left
    # can hold that up. Within bench_scaling's wait for this process.
    for c in conns:
        c.send(("quit", 0))
    for p in procs:
        p.join(timeout=3)
        if p.is_alive():
            p.kill()


if __name__ == "__main__":
    main()
