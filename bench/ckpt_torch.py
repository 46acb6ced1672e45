"""The peer of bench_ckpt: torch.save of one rank's state (parameters and
AdamW's two moments, the same float counts as Giant's rank holds), then
fsync, timed. Usage: ckpt_torch.py OUT.pt NFLOATS. Prints 'ms=<t>'.
Exit 3 when torch is not installed."""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(3)

out, n = sys.argv[1], int(sys.argv[2])
state = {"params": torch.randn(n), "exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n), "step": 10}
best = None
for _ in range(3):
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    t = time.perf_counter() - t0
    best = t if best is None or t < best else best
os.unlink(out)
print("ms=%.3f" % (best * 1e3))
