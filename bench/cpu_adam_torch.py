"""The peer of bench_cpu_adam: torch.optim.AdamW(foreach=True) on N fp32
parameters on the CPU with THREADS threads, split into tensors of at most
16 Mi elements as a model's are. Usage: cpu_adam_torch.py N THREADS WARMUP
STEPS. Prints its configuration, then 'torch_adamw_s=<median step>'.
Exit 3 when torch is not installed."""
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(3)

n, threads, warmup, steps = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
chunk = 16 << 20
params = []
for lo in range(0, n, chunk):
    p = torch.full((min(chunk, n - lo),), 0.5, requires_grad=True)
    p.grad = torch.full((p.numel(),), 1e-3)
    params.append(p)
opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=True)
times = []
for i in range(warmup + steps):
    t0 = time.perf_counter()
    opt.step()
    if i >= warmup:
        times.append(time.perf_counter() - t0)
times.sort()
mid = len(times) // 2
med = times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])
print("torch %s: AdamW(foreach=True), %d tensors, torch.set_num_threads(%d)" % (torch.__version__, len(params), threads))
print("torch_adamw_s=%.6f" % med)
