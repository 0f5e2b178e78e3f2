#!/usr/bin/env python3
"""bench_block_torch.py — one transformer block, forward + backward, in PyTorch eager: the
reference `make gpu-check` divides our time by (tools/tp_bench --suite block).

The same block as tp::TransformerBlock at t = 1 without dropout (lib/model/gpt.h):

    x1 = x  + proj(attn(ln_1(x)))          attn: separate q, k, v linears with biases, causal
    x2 = x1 + fc2(gelu_tanh(fc1(ln_2(x1))))      softmax(q kᵀ / √hd) v with the probabilities
                                                 materialised (B, nh, S, S), as ours are
    activations sequence-major (S, B, h), LayerNorm eps 1e-5, ffn = 4h

in fp32 with TF32 off (PyTorch's default for matmuls), or with --tf32 (TF32 tensor cores for
matmuls, like tp_bench --tf32). Timed like tp_bench: one warm-up, then the best of --reps, each
bracketed by torch.cuda.synchronize(). Prints

    RESULT torch <precision>.fwd_ms <ms> ms 0 0
    RESULT torch <precision>.fwd_bwd_ms <ms> ms 0 0

Without PyTorch or without a CUDA device it prints one line saying so and exits 3.
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
    args = ap.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_block_torch: no PyTorch ({e})")
        return 3
    if not torch.cuda.is_available():
        print("bench_block_torch: PyTorch sees no CUDA device")
        return 3

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    precision = "tf32" if args.tf32 else "fp32"
    dev = torch.device("cuda")
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
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best

    def fwd():  # with autograd on, so it saves what backward needs, as our forward does
        block(x)

    def fwd_bwd():
        block(x).backward(dy)

    t_fwd = timed(fwd)
    t_both = timed(fwd_bwd)
    name = torch.cuda.get_device_name(dev)
    print(f"# PyTorch {torch.__version__} eager on {name} ({precision}), h = {h}, s = {s}, b = {b}, "
          f"{nh} heads: forward {t_fwd * 1e3:.2f} ms, forward + backward {t_both * 1e3:.2f} ms")
    print(f"RESULT torch {precision}.fwd_ms {t_fwd * 1e3:.6g} ms 0 0")
    print(f"RESULT torch {precision}.fwd_bwd_ms {t_both * 1e3:.6g} ms 0 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
