#!/usr/bin/env python3
"""hf_gpt2_check.py — tp_train against an independent GPT-2, on files in the Hugging Face layout.

  python3 scripts/hf_gpt2_check.py [BUILD]        (run-tests.sh runs it; MPIEXEC, MPI_FLAGS as there)

1. Writes a small random GPT-2 in the hub's layout (GPT2Model names without "transformer.", Conv1D
   weights stored (in, out), the attention-mask buffers h.N.attn.bias) with a config.json beside it,
   once in F32 and once in F16 (no config.json: --heads given instead).
2. Runs `tp_train --init-from FILE --steps 1 --seq 8 --dump-grads G` at t = 1 and t = 2: G holds the
   batch, the loss and every global gradient.
3. Computes the same loss and gradients with the GPT-2 below: written from the GPT-2 paper and the
   Hugging Face model's documented conventions (pre-norm LayerNorm with eps from config.json, GeLU
   with the tanh approximation "gelu_new", learned positions, attention scaled by 1/sqrt(head_dim),
   tied head), in float64 with torch autograd, not from this project's code. Loss within 1e-5 and
   every gradient within 1e-4 (relative; the project computes in fp32).
4. `tp_train --init-from FILE --steps 0 --export-hf OUT`: OUT/model.safetensors holds the same F32
   weights bit for bit, under GPT2LMHeadModel's names, with format "pt"; OUT/config.json agrees.
5. When the transformers package is installed: GPT2LMHeadModel.from_pretrained(OUT) gives the same
   loss on the same batch (within 1e-5). Without it, one line says that step was skipped.

Prints one line per check ("✓ ..." or "✗ ...") and exits 1 when any failed, 0 otherwise.
"""
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # run-tests.sh checks first; this is for running it by hand
    print(f"skipped: {e} (the check needs numpy and torch)")
    sys.exit(0)

FAILED = []


def check(ok, what):
    print(("✓ " if ok else "✗ ") + what)
    if not ok:
        FAILED.append(what)


# ---- safetensors, just enough to read and write these files -------------------------------------

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "BF16": None}


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        a = np.ascontiguousarray(t, dtype=np.float32)
        if dtype == "F16":
            raw = a.astype(np.float16).tobytes()
        elif dtype == "BF16":  # round to nearest even on the top 16 bits
            u = a.view(np.uint32).astype(np.uint64)
            raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b0, b1 = e["data_offsets"]
        raw = data[b0:b1]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, DTYPES[e["dtype"]])
        out[name] = a.reshape(e["shape"]) if e["shape"] else a.reshape(())
    return out, meta


# ---- GPT-2 -------------------------------------------------------------------------------------


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_loss(w, cfg, ids, labels):
    """Mean cross-entropy of GPT-2 with weights w (hub names, no prefix) on ids (B, S)."""
    B, S = ids.shape
    h, nh, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    hd = h // nh
    x = w["wte.weight"][ids] + w["wpe.weight"][:S]
    causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."

        def ln(v, name):
            return torch.nn.functional.layer_norm(v, (h,), w[p + name + ".weight"], w[p + name + ".bias"], eps)

        qkv = ln(x, "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x W + b
        q, k, v = (t.reshape(B, S, nh, hd).transpose(1, 2) for t in qkv.split(h, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, h)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = gelu_new(ln(x, "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (h,), w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x @ w["wte.weight"].T  # tied head
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def random_gpt2(cfg, seed):
    g = np.random.default_rng(seed)
    h, f, V, P = cfg["n_embd"], 4 * cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    shapes = {"wte.weight": (V, h), "wpe.weight": (P, h), "ln_f.weight": (h,), "ln_f.bias": (h,)}
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        shapes.update({p + "ln_1.weight": (h,), p + "ln_1.bias": (h,), p + "ln_2.weight": (h,),
                       p + "ln_2.bias": (h,), p + "attn.c_attn.weight": (h, 3 * h),
                       p + "attn.c_attn.bias": (3 * h,), p + "attn.c_proj.weight": (h, h),
                       p + "attn.c_proj.bias": (h,), p + "mlp.c_fc.weight": (h, f),
                       p + "mlp.c_fc.bias": (f,), p + "mlp.c_proj.weight": (f, h),
                       p + "mlp.c_proj.bias": (h,)})
    w = {}
    for name, shape in shapes.items():
        scale = 0.3 if name.endswith("weight") and len(shape) == 2 else 0.1
        w[name] = (g.standard_normal(shape) * scale).astype(np.float32)
        if "ln_" in name and name.endswith("weight"):
            w[name] += 1.0
    return w


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    mpiexec = shlex.split(os.environ.get("MPIEXEC", "mpirun")) + shlex.split(os.environ.get("MPI_FLAGS", ""))
    train = os.path.join(build, "bin", "tp_train")
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 32,
           "n_head": 4, "n_inner": None, "n_positions": 16, "n_ctx": 16, "vocab_size": 96,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    weights = random_gpt2(cfg, 7)
    tmp = tempfile.mkdtemp(prefix="tp_hf_check_")

    def run(*args):
        r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if r.returncode != 0:
            print(r.stdout[-2000:])
        return r

    for dtype in ("F32", "F16"):
        d = os.path.join(tmp, dtype)
        os.makedirs(d)
        path = os.path.join(d, "model.safetensors")
        tensors = dict(weights)
        causal = np.tril(np.ones((16, 16), np.float32)).reshape(1, 1, 16, 16)
        for l in range(cfg["n_layer"]):
            tensors[f"h.{l}.attn.bias"] = causal  # the hub's mask buffer, which the reader skips
        write_safetensors(path, tensors, dtype, {"format": "pt"})
        extra = []
        if dtype == "F32":
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
        else:
            extra = ["--heads", "4"]
        stored, _ = read_safetensors(path)  # the values as the file holds them (F16-rounded)
        w = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in stored.items()}
        for t in (1, 2):
            dump = os.path.join(d, f"grads_t{t}.safetensors")
            r = run(*mpiexec, "-np", str(t), train, "--init-from", path, "--steps", "1", "--seq", "8",
                    "--batch", "3", "--dump-grads", dump, *extra)
            if r.returncode != 0:
                check(False, f"{dtype}, t = {t}: tp_train --init-from exited {r.returncode}")
                continue
            g, _ = read_safetensors(dump)
            ids = torch.tensor(g["batch.input_ids"].astype(np.int64))
            labels = torch.tensor(g["batch.labels"].astype(np.int64))
            for v in w.values():
                v.grad = None
            loss = gpt2_loss(w, cfg, ids, labels)
            loss.backward()
            mine = float(g["loss"][0])
            check(abs(mine - loss.item()) <= 1e-5 * abs(loss.item()),
                  f"{dtype} hub file, t = {t}: tp_train's loss {mine:.7f} = independent GPT-2 {loss.item():.7f}")
            worst, name_w = 0.0, ""
            for name, v in w.items():
                if name.endswith(".attn.bias"):
                    continue
                got, want = g["grad.transformer." + name].astype(np.float64), v.grad.numpy()
                if name.endswith("c_attn.bias"):
                    # The key bias [h, 2h) has no gradient in exact arithmetic (softmax ignores a
                    # constant added to a row): only its fp32 noise, so q's and v's parts are compared.
                    h = cfg["n_embd"]
                    got, want = np.concatenate([got[:h], got[2 * h:]]), np.concatenate([want[:h], want[2 * h:]])
                e = rel(got, want)
                if worst < e:
                    worst, name_w = e, name
            check(worst <= 1e-4, f"{dtype} hub file, t = {t}: every gradient within 1e-4 of the "
                  f"independent GPT-2 (worst {worst:.1e}, {name_w})")

    # Export: the F32 file in, 0 steps, out again.
    src = os.path.join(tmp, "F32", "model.safetensors")
    out = os.path.join(tmp, "export")
    r = run(*mpiexec, "-np", "2", train, "--init-from", src, "--steps", "0", "--seq", "8", "--export-hf", out)
    check(r.returncode == 0, "tp_train --init-from ... --steps 0 --export-hf at t = 2")
    if r.returncode == 0:
        ex, meta = read_safetensors(os.path.join(out, "model.safetensors"))
        same = all(np.array_equal(ex["transformer." + k], v) for k, v in weights.items())
        names = sorted(ex) == sorted("transformer." + k for k in weights)
        check(same and names and meta.get("format") == "pt" and all(a.dtype == np.float32 for a in ex.values()),
              "export: GPT2LMHeadModel's names, F32, format pt, every weight bit for bit")
        with open(os.path.join(out, "config.json")) as f:
            c2 = json.load(f)
        keys = ["n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "layer_norm_epsilon",
                "activation_function", "tie_word_embeddings", "model_type"]
        check(all(c2[k] == cfg[k] for k in keys) and c2["n_inner"] in (None, 4 * cfg["n_embd"]),
              "export: config.json agrees with the source's")
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("skipped: transformers is not installed, so GPT2LMHeadModel.from_pretrained of the "
                  "export was not tried (the independent GPT-2 above checked the numbers)")
            return
        model = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
        g, _ = read_safetensors(os.path.join(tmp, "F32", "grads_t1.safetensors"))
        ids = torch.tensor(g["batch.input_ids"].astype(np.int64))
        labels = torch.tensor(g["batch.labels"].astype(np.int64))
        with torch.no_grad():
            logits = model(ids).logits
        theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).item()
        mine = float(g["loss"][0])
        check(abs(mine - theirs) <= 1e-5 * abs(theirs),
              f"transformers' GPT2LMHeadModel on the export: loss {theirs:.7f} = tp_train's {mine:.7f}")


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILED else 0)
