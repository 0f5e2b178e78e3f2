#!/usr/bin/env python3
"""bench_gpt_torch.py — tp_train's GPT at t = 1, trained in PyTorch eager on the CPU: the
reference `make bench` sets our training tokens/s beside.

The same model as tp::Gpt with the defaults of tp_train (docs/model.md; --act gelu, --norm
layernorm, tied head, no dropout, nkv = nh):

    e  = wte[x] + wpe[s]                             wte (V, h), wpe (S, h)
    x1 = x  + c_proj(attn(ln_1(x)))                  c_attn: one linear h → 3h, columns q | k | v,
    x2 = x1 + mlp.c_proj(gelu_tanh(c_fc(ln_2(x1))))  head j = columns [j·hd, (j+1)·hd) of each;
    logits = ln_f(x_L) wteᵀ                          softmax(q kᵀ / √hd) v, causal, with the
    loss = mean cross-entropy over the B·S tokens    probabilities materialised (B, nh, S, S)

Every linear has a bias and its weight is stored (in, out), as in the checkpoint (Hugging Face
GPT-2's Conv1D): y = x W + b. LayerNorm eps 1e-5, ffn = --ffn or 4h. fp32 on the CPU with
torch.set_num_threads(--threads) and one inter-op thread. Activations are batch-major (B, S, h)
here and sequence-major in C++: the same numbers in another order. Initialisation: N(0, 0.02) for
the matrices and embeddings, N(0, 0.02/√(2L)) for both c_proj, biases 0, norm weights 1 (the same
distributions as tp::Gpt::init, not the same numbers; --check loads tp_train's own).

A training step is tp::train_step's: zero the gradients, forward, loss, backward, clip the global
gradient norm to --clip (torch.nn.utils.clip_grad_norm_), AdamW (lr 1e-3, betas (0.9, 0.95),
eps 1e-8, --weight-decay, default 0, on matrices and embeddings only).

--check DIR first proves the model identical: it loads DIR/init.safetensors and runs one forward
and backward on the batch of DIR/grads.safetensors, then compares the loss and every gradient with
those tp_train wrote there (relative error ‖a − b‖ / ‖b‖ per tensor):

    build/bin/tp_train <flags> --steps 0 --save DIR/init.safetensors
    build/bin/tp_train <flags> --load DIR/init.safetensors --steps 1 --dump-grads DIR/grads.safetensors

(safetensors read with the standard library and torch: 8-byte little-endian header length, JSON
header, raw data.) Timing then starts from those weights; without --check from fresh ones. --warmup
untimed steps, then --steps timed steps on uniformly random token batches, each timed on its own
(drawing the batch included, as tp_train does). Prints

    RESULT torch check_loss_rel <value>        (with --check)
    RESULT torch check_grad_rel <value>        (with --check: the largest over all tensors)
    RESULT torch tokens_per_s <value> threads <n>

tokens_per_s is the median over the timed steps of B·S / (step time): the statistic `make bench`
takes over tp_train's per-step tokens_per_s from --log-json.

Exit codes: 0 done, 1 the check failed (loss beyond 1e-6 or a gradient beyond 1e-5 relative),
2 bad arguments or check files that do not fit the flags, 3 no PyTorch (one line says so).
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

# Measured on the twin: loss 0 to 8.6e-8, gradients ≤ 9.0e-7 (fp32 in another summation order;
# with OpenBLAS's kernels Sandybridge 8.4e-7, Haswell 8.6e-7, SkylakeX 9.0e-7): 11× inside GRAD_TOL.
# A GeLU with erf instead of tanh shows 4e-5 .. 2e-4 in the gradients, q and k swapped 0.12; the
# loss at initialisation is nearly uniform, so the gradients are what tell a wrong model apart.
LOSS_TOL = 1e-6
GRAD_TOL = 1e-5


def read_safetensors(path, torch):
    """{name: tensor} and the metadata of a safetensors file (F32 and I32 tensors only)."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "I32": torch.int32}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in dtypes:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, expected F32 or I32")
        begin, end = info["data_offsets"]
        dtype = dtypes[info["dtype"]]
        count = (end - begin) // 4
        t = torch.frombuffer(raw, dtype=dtype, count=count, offset=8 + n + begin) if count else \
            torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, meta


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks L")
    ap.add_argument("--hidden", type=int, default=64, help="hidden size h")
    ap.add_argument("--heads", type=int, default=4, help="attention heads nh")
    ap.add_argument("--ffn", type=int, default=0, help="MLP inner size; 0 = 4 h")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary V; 0 = 256")
    ap.add_argument("--seq", type=int, default=64, help="sequence length S")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step B")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (constant)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="on matrices and embeddings")
    ap.add_argument("--clip", type=float, default=1.0, help="global gradient norm; 0 = none")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (0: only --check)")
    ap.add_argument("--seed", type=int, default=1234, help="of the fresh weights and the batches")
    ap.add_argument("--check", metavar="DIR", default="",
                    help="compare loss and gradients with DIR/{init,grads}.safetensors first")
    args = ap.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_gpt_torch: no PyTorch in {sys.executable} ({e})")
        return 3

    L, h, nh, S, B = args.layers, args.hidden, args.heads, args.seq, args.batch
    V = args.vocab or 256
    ffn = args.ffn or 4 * h
    problems = [f"--{k}={v} must be at least 1" for k, v in
                (("layers", L), ("hidden", h), ("heads", nh), ("seq", S), ("batch", B),
                 ("threads", args.threads)) if v < 1]
    if nh >= 1 and h % nh:
        problems.append(f"--hidden={h} is not divisible by --heads={nh}")
    if args.steps < 0 or args.warmup < 0:
        problems.append("--steps and --warmup must be 0 or more")
    if problems:
        print("bench_gpt_torch: " + "; ".join(problems))
        return 2
    hd = h // nh

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    # ---- the model: parameters under the checkpoint's names and layouts -------------------------
    shapes = {"transformer.wte.weight": (V, h), "transformer.wpe.weight": (S, h)}
    for l in range(L):
        p = f"transformer.h.{l}."
        shapes.update({
            p + "ln_1.weight": (h,), p + "ln_1.bias": (h,),
            p + "attn.c_attn.weight": (h, 3 * h), p + "attn.c_attn.bias": (3 * h,),
            p + "attn.c_proj.weight": (h, h), p + "attn.c_proj.bias": (h,),
            p + "ln_2.weight": (h,), p + "ln_2.bias": (h,),
            p + "mlp.c_fc.weight": (h, ffn), p + "mlp.c_fc.bias": (ffn,),
            p + "mlp.c_proj.weight": (ffn, h), p + "mlp.c_proj.bias": (h,),
        })
    shapes.update({"transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)})

    params = {}
    for name, shape in shapes.items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            t = torch.ones(shape)
        elif len(shape) == 1:
            t = torch.zeros(shape)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape) * std
        params[name] = t.requires_grad_()

    def linear(x, prefix):  # x (…, in) W (in, out) + b: GPT-2's Conv1D
        return torch.addmm(params[prefix + ".bias"], x.reshape(-1, x.shape[-1]),
                           params[prefix + ".weight"]).view(*x.shape[:-1], -1)

    def layer_norm(x, prefix):
        return F.layer_norm(x, (h,), params[prefix + ".weight"], params[prefix + ".bias"], 1e-5)

    causal = torch.ones(S, S, dtype=torch.bool).triu(1)  # True above the diagonal: masked

    def attention(x, prefix):  # x: (B, S, h)
        b, s, _ = x.shape
        q, k, v = linear(x, prefix + ".c_attn").split(h, dim=-1)  # q | k | v
        q, k, v = (t.view(b, s, nh, hd).transpose(1, 2) for t in (q, k, v))  # (B, nh, S, hd)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        probs = torch.softmax(scores.masked_fill(causal[:s, :s], float("-inf")), dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, s, h)
        return linear(out, prefix + ".c_proj")

    def mlp(x, prefix):
        return linear(F.gelu(linear(x, prefix + ".c_fc"), approximate="tanh"), prefix + ".c_proj")

    def loss_of(ids, labels):  # ids, labels: (B, S) int64
        s = ids.shape[1]
        x = F.embedding(ids, params["transformer.wte.weight"]) + params["transformer.wpe.weight"][:s]
        for l in range(L):
            p = f"transformer.h.{l}"
            x = x + attention(layer_norm(x, p + ".ln_1"), p + ".attn")
            x = x + mlp(layer_norm(x, p + ".ln_2"), p + ".mlp")
        logits = layer_norm(x, "transformer.ln_f") @ params["transformer.wte.weight"].t()  # tied
        return F.cross_entropy(logits.view(-1, V), labels.reshape(-1))

    # ---- the identity check ----------------------------------------------------------------------
    check_loss_rel = check_grad_rel = None
    if args.check:
        paths = [os.path.join(args.check, f) for f in ("init.safetensors", "grads.safetensors")]
        for path in paths:
            if not os.path.isfile(path):
                print(f"bench_gpt_torch: --check {args.check}: no {path} (write it with tp_train; "
                      "see the docstring)")
                return 2
        (init, init_meta), (dump, dump_meta) = (read_safetensors(p, torch) for p in paths)
        want = {"layers": L, "hidden": h, "heads": nh, "kv_heads": nh, "ffn": ffn, "vocab": V,
                "seq": S, "act": "gelu", "norm": "layernorm", "tied": "true"}
        problems = [f"{path} was written with {k}={meta[k]}, this run has {v}"
                    for path, meta in zip(paths, (init_meta, dump_meta))
                    for k, v in want.items() if k in meta and meta[k] != str(v)]
        for name, shape in shapes.items():
            for path, tensors, key in ((paths[0], init, name), (paths[1], dump, "grad." + name)):
                if key not in tensors:
                    problems.append(f"{path} has no tensor {key}")
                elif tuple(tensors[key].shape) != shape:
                    problems.append(f"{path}: {key} has shape {list(tensors[key].shape)}, "
                                    f"expected {list(shape)}")
        extra = sorted(k[5:] for k in dump if k.startswith("grad.") and k[5:] not in shapes)
        if extra:
            problems.append(f"{paths[1]} has gradients this model lacks: {', '.join(extra)}")
        for key in ("batch.input_ids", "batch.labels"):
            if key not in dump or tuple(dump[key].shape) != (B, S):
                problems.append(f"{paths[1]}: {key} missing or not (B, S) = ({B}, {S})")
        if problems:
            more = f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
            print("bench_gpt_torch: the check files do not fit the flags (pass the flags tp_train "
                  "wrote them with): " + "; ".join(problems[:4]) + more)
            return 2
        with torch.no_grad():
            for name, t in params.items():
                t.copy_(init[name])
        ids, labels = dump["batch.input_ids"].long(), dump["batch.labels"].long()
        loss = loss_of(ids, labels)
        loss.backward()
        ref_loss = float(dump["loss"].reshape(-1)[0])
        check_loss_rel = abs(loss.item() - ref_loss) / abs(ref_loss)
        worst_name, check_grad_rel = "", 0.0
        for name, t in params.items():
            ref = dump["grad." + name]
            rel = ((t.grad - ref).norm() / ref.norm()).item() if ref.norm() > 0 else \
                t.grad.norm().item()
            if rel > check_grad_rel or worst_name == "":
                worst_name, check_grad_rel = name, rel
            t.grad = None
        ok = check_loss_rel <= LOSS_TOL and check_grad_rel <= GRAD_TOL
        print(f"# check against {args.check}: loss {loss.item():.7f} (tp_train {ref_loss:.7f}, "
              f"relative {check_loss_rel:.2e}, tolerance {LOSS_TOL:g}); largest gradient "
              f"relative error {check_grad_rel:.2e} ({worst_name}; {len(params)} tensors, "
              f"tolerance {GRAD_TOL:g}): {'identical model' if ok else 'FAILED'}")
        print(f"RESULT torch check_loss_rel {check_loss_rel:.6g}")
        print(f"RESULT torch check_grad_rel {check_grad_rel:.6g}")
        if not ok:
            return 1

    # ---- timing: full training steps as tp::train_step ----------------------------------------
    if args.steps == 0:
        return 0
    matrices = [t for t in params.values() if t.dim() == 2]  # weights, wte, wpe: decayed
    others = [t for t in params.values() if t.dim() != 2]  # biases, norm weights
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": args.weight_decay},
                             {"params": others, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    everything = list(params.values())

    def train_step():
        tokens = torch.randint(0, V, (B, S + 1))
        opt.zero_grad(set_to_none=True)
        loss = loss_of(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(everything, args.clip)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        train_step()
    rates = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = train_step()
        rates.append(B * S / (time.perf_counter() - t0))
    median = statistics.median(rates)
    n_params = sum(t.numel() for t in params.values())
    print(f"# PyTorch {torch.__version__} eager, CPU fp32, {torch.get_num_threads()} thread(s): "
          f"L={L} h={h} nh={nh} ffn={ffn} V={V} S={S} B={B}, {n_params} parameters; "
          f"{args.steps} steps after {args.warmup} warm-up: median {median:.0f} tok/s "
          f"(best {max(rates):.0f}, worst {min(rates):.0f}), last loss {loss:.4f}")
    print(f"RESULT torch tokens_per_s {median:.6g} threads {args.threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
