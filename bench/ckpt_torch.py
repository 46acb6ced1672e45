"""The peer of bench_ckpt: torch.save of the tensors one Giant rank writes
into its checkpoint shard (parameters and AdamW's two moments, by name and
size as the shard holds them), then fsync, timed.

Usage: ckpt_torch.py OUT.pt SPEC, SPEC a file of lines 'NAME NUMEL'.
It builds the state, prints 'ready', then answers each line 'save' on
stdin with 'ms=<save + fsync> bytes=<the file's size>', so that Giant's
ranks start each save of both peers at the same moment. Exit 3 when torch
is not installed."""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(3)

out, spec = sys.argv[1], sys.argv[2]
state = {"step": 10}
with open(spec) as f:
    for line in f:
        name, n = line.split()
        # v (adamw.v) is never negative; the values do not change the bytes
        state[name] = torch.rand(int(n)) if name.startswith("adamw.v") else torch.randn(int(n))
print("ready", flush=True)
for cmd in sys.stdin:
    if cmd.strip() != "save":
        print("error: unknown command %r" % cmd.strip(), flush=True)
        continue
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    t = time.perf_counter() - t0
    print("ms=%.3f bytes=%d" % (t * 1e3, os.path.getsize(out)), flush=True)
if os.path.exists(out):
    os.unlink(out)
