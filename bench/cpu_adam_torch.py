"""The peer of bench_cpu_adam: torch.optim.AdamW(foreach=True) on N fp32
parameters on the CPU with THREADS threads, split into tensors of at most
16 Mi elements as a model's are. Usage: cpu_adam_torch.py N THREADS.

It prints its configuration, then 'ready'; then it answers each line
'step' on stdin with 's=<one optimizer step's seconds>', so that the
benchmark runs its steps in the same rounds as Giant's. Exit 3 when torch
is not installed."""
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(3)

n, threads = (int(a) for a in sys.argv[1:3])
torch.set_num_threads(threads)
chunk = 16 << 20
params = []
for lo in range(0, n, chunk):
    p = torch.full((min(chunk, n - lo),), 0.5, requires_grad=True)
    p.grad = torch.full((p.numel(),), 1e-3)
    params.append(p)
opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=True)
print("torch %s: AdamW(foreach=True), %d tensors, torch.set_num_threads(%d)" % (torch.__version__, len(params), threads))
print("ready", flush=True)
for cmd in sys.stdin:
    if cmd.strip() != "step":
        print("error: unknown command %r" % cmd.strip(), flush=True)
        continue
    t0 = time.perf_counter()
    opt.step()
    print("s=%.6f" % (time.perf_counter() - t0), flush=True)
