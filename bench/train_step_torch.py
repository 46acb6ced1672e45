"""PyTorch baseline for bench/train_step: the same GPT, step and weights.

Started by bench_train_step as:
  python3 train_step_torch.py DIR SHAPE THREADS DEVICE PRECISION [MODEL]
MODEL is gpt (SHAPE B,T,V,C,NH,L; gpt_torch.py) or llama (SHAPE
B,T,V,C,NH,L,NKV,H; llama_torch.py).
DEVICE is cpu, cuda or cuda:N; PRECISION is fp32 or bf16 (torch.autocast to bfloat16
around forward and loss, with fp32 weights, gradients and AdamW state: the
usual PyTorch mixed precision). Loads DIR/params.txt + params.bin (Giant's
parameter buffer) and tokens.bin (the model: gpt_torch.py or llama_torch.py), prints "ready" (or "unavailable: WHY" and
exits), then answers commands on stdin, one line each:
  losses N  -> the losses of N training steps, space separated
  time N    -> mean milliseconds per step over N steps
  reset     -> reload the weights and a fresh optimizer
  threads 0 -> "OPENBLAS INTRA": openblas_get_num_threads() of the BLAS torch
               loaded (-1 if it is not OpenBLAS) and torch.get_num_threads()
"""
import contextlib
import ctypes
import importlib
import os
import sys
import time

import torch

DIR, SHAPE, THREADS = sys.argv[1], sys.argv[2], int(sys.argv[3])
DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
PRECISION = sys.argv[5] if len(sys.argv) > 5 else "fp32"
MODEL = sys.argv[6] if len(sys.argv) > 6 else "gpt"
if MODEL not in ("gpt", "llama"):
    print(f"unavailable: model {MODEL!r} not supported; use gpt or llama", flush=True)
    sys.exit(0)
gpt = importlib.import_module(f"{MODEL}_torch")
SHAPE_ = gpt.Shape(SHAPE)
DEVICE_TYPE = DEVICE.split(":")[0]
if DEVICE_TYPE not in ("cpu", "cuda") or PRECISION not in ("fp32", "bf16"):
    print(f"unavailable: device {DEVICE!r} / precision {PRECISION!r} not supported; use cpu|cuda and fp32|bf16",
          flush=True)
    sys.exit(0)
if DEVICE_TYPE == "cuda" and not torch.cuda.is_available():
    print("unavailable: torch.cuda.is_available() is False (no GPU, or torch built without CUDA)", flush=True)
    sys.exit(0)
torch.set_num_threads(THREADS)
torch.manual_seed(0)
# Giant's fp32 CUDA products are full fp32 unless GT_CUDA_TF32=1; match it.
torch.backends.cuda.matmul.allow_tf32 = os.environ.get("GT_CUDA_TF32") == "1"


def autocast():
    if PRECISION == "bf16":
        return torch.autocast(device_type=DEVICE_TYPE, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def load_params():
    return {n: t.requires_grad_(True) for n, t in gpt.load_params(DIR, SHAPE_, DEVICE).items()}


def forward(p, idx, targets):
    return gpt.forward(p, idx, targets, SHAPE_, MASK)


def optimizer(p):
    return gpt.optimizer(p.items())


MASK = gpt.causal_mask(SHAPE_, DEVICE)
idx, targets = gpt.load_tokens(DIR, SHAPE_, DEVICE)
params = load_params()
opt = optimizer(params)


def step():
    opt.zero_grad(set_to_none=True)
    with autocast():
        loss = forward(params, idx, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
    opt.step()
    return loss.item()


def openblas_threads():
    # The BLAS torch's matrix products go through, as loaded in this process
    # (Debian's torch links the system libblas, an alternative that may be
    # OpenBLAS); -1 when it is not OpenBLAS. An OpenMP build of OpenBLAS
    # (Debian's default) follows OpenMP's thread count, which
    # torch.set_num_threads sets, whatever OPENBLAS_NUM_THREADS says: this
    # is the count its products actually use.
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line.split()[-1]}
    for lib in sorted(libs):
        try:
            return ctypes.CDLL(lib).openblas_get_num_threads()
        except (OSError, AttributeError):
            continue
    return -1


print("ready", flush=True)
for line in sys.stdin:
    cmd, n = line.split()
    n = int(n)
    if cmd == "losses":
        print(" ".join(f"{step():.8f}" for _ in range(n)), flush=True)
    elif cmd == "time":
        if DEVICE_TYPE == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if DEVICE_TYPE == "cuda":
            torch.cuda.synchronize()
        print(f"{(time.perf_counter() - t0) / n * 1e3:.3f}", flush=True)
    elif cmd == "threads":
        print(f"{openblas_threads()} {torch.get_num_threads()}", flush=True)
    elif cmd == "reset":
        params = load_params()
        opt = optimizer(params)
        print("ok", flush=True)
