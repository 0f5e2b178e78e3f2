#!/usr/bin/env python3
"""bench_block_torch.py — one transformer block, forward + backward, in PyTorch eager: the
reference `make gpu-check` divides our time by (tools/tp_bench --suite block).

The same block as tp::TransformerBlock at t = 1 without dropout (lib/model/gpt.h):

    x1 = x  + proj(attn(ln_1(x)))          attn: separate q, k, v linears with biases, causal
    x2 = x1 + fc2(gelu_tanh(fc1(ln_2(x1))))      softmax(q kᵀ / √hd) v with the probabilities
                                                 materialised (B, nh, S, S), as ours are
    activations sequence-major (S, B, h), LayerNorm eps 1e-5, ffn = 4h

in fp32 with TF32 off (PyTorch's default for matmuls), or with --tf32 (TF32 tensor cores for
matmuls, like tp_bench --tf32), or with --bf16: the forward under
torch.autocast(dtype=torch.bfloat16) — PyTorch's mixed precision, against tp_bench --precision bf16
(fp32 parameters, bf16 matmuls with fp32 accumulation; autocast keeps LayerNorm and softmax in
fp32, where ours store bf16 activations and keep only the statistics in fp32), the backward
outside it, as PyTorch's AMP recipe does. Timed like tp_bench: one warm-up, then the best of
--reps, each bracketed by a synchronize. Prints

    RESULT torch <precision>.fwd_ms <ms> ms 0 0
    RESULT torch <precision>.fwd_bwd_ms <ms> ms 0 0

--device cpu runs the same block on the CPU (autocast's CPU bf16 under --bf16): a dry run that the
script and its parsing work where there is no GPU (make gpu-emu); its timings mean nothing.
Without PyTorch or without the device it prints one line saying so and exits 3.
"""
import argparse
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=0, help="ignored (tp_bench's GEMM/memory size)")
    ap.add_argument("--tf32", action="store_true", help="TF32 tensor cores for matmuls")
    ap.add_argument("--bf16", action="store_true",
                    help="forward under torch.autocast(dtype=torch.bfloat16)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a dry run without a GPU (timings mean nothing)")
    args = ap.parse_args()
    if args.tf32 and args.bf16:
        print("bench_block_torch: --tf32 and --bf16 exclude each other; pick one")
        return 2

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_block_torch: no PyTorch ({e})")
        return 3
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        print("bench_block_torch: PyTorch sees no CUDA device")
        return 3

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    precision = "bf16" if args.bf16 else "tf32" if args.tf32 else "fp32"
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    # Mixed precision: autocast around the forward only (the backward runs outside it).
    if args.bf16:
        def autocast():
            return torch.autocast(device_type=args.device, dtype=torch.bfloat16)
    else:
        import contextlib

        def autocast():
            return contextlib.nullcontext()
    h, s, b, nh = args.hidden, args.seq, args.batch, args.heads
    hd = h // nh
    ffn = 4 * h
    torch.manual_seed(1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = torch.nn.LayerNorm(h, eps=1e-5)
            self.q = torch.nn.Linear(h, h)
            self.k = torch.nn.Linear(h, h)
            self.v = torch.nn.Linear(h, h)
            self.proj = torch.nn.Linear(h, h)
            self.ln_2 = torch.nn.LayerNorm(h, eps=1e-5)
            self.fc1 = torch.nn.Linear(h, ffn)
            self.fc2 = torch.nn.Linear(ffn, h)
            self.register_buffer("mask", torch.ones(s, s, dtype=torch.bool).triu(1))

        def heads(self, t):  # (S, B, h) → (B, nh, S, hd)
            return t.view(s, b, nh, hd).permute(1, 2, 0, 3)

        def forward(self, x):  # x: (S, B, h)
            a = self.ln_1(x)
            q, k, v = self.heads(self.q(a)), self.heads(self.k(a)), self.heads(self.v(a))
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            probs = torch.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1)
            o = (probs @ v).permute(2, 0, 1, 3).reshape(s, b, h)
            x1 = x + self.proj(o)
            return x1 + self.fc2(F.gelu(self.fc1(self.ln_2(x1)), approximate="tanh"))

    block = Block().to(dev)
    x = torch.randn(s, b, h, device=dev, requires_grad=True)
    dy = torch.randn(s, b, h, device=dev)

    def timed(fn):
        fn()
        sync()
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - t0)
        return best

    def fwd():  # with autograd on, so it saves what backward needs, as our forward does
        with autocast():
            return block(x)

    def fwd_bwd():
        fwd().backward(dy)  # under --bf16 the output is bf16 and dy is cast to it

    t_fwd = timed(fwd)
    t_both = timed(fwd_bwd)
    name = torch.cuda.get_device_name(dev) if on_gpu else "the CPU (dry run: timings mean nothing)"
    print(f"# PyTorch {torch.__version__} eager on {name} ({precision}), h = {h}, s = {s}, b = {b}, "
          f"{nh} heads: forward {t_fwd * 1e3:.2f} ms, forward + backward {t_both * 1e3:.2f} ms")
    print(f"RESULT torch {precision}.fwd_ms {t_fwd * 1e3:.6g} ms 0 0")
    print(f"RESULT torch {precision}.fwd_bwd_ms {t_both * 1e3:.6g} ms 0 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
