"""grads_close.py A B [TOL] — two --dump-grads files (safetensors) hold the same tensors: the batch
bitwise, the loss within TOL·|loss|, every gradient within TOL relative (‖a − b‖₂ ≤ TOL·‖b‖₂).
Prints one line (the worst gradient and its error) and exits 0, or names the first difference
and exits 1. No third-party modules (scripts/tests/pp-features.sh runs it)."""
import json
import math
import struct
import sys
from array import array


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        a = array({"F32": "f", "I32": "i"}[t["dtype"]])
        a.frombytes(data[lo:hi])
        out[name] = (t["shape"], a)
    return out


def main():
    a, b = read(sys.argv[1]), read(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    if sorted(a) != sorted(b):
        print(f"different tensors: {sorted(set(a) ^ set(b))}")
        return 1
    worst = (0.0, "")
    for name in sorted(a):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            print(f"{name}: shape {sa} vs {sb}")
            return 1
        if name.startswith("batch."):
            if va != vb:
                print(f"{name} differs")
                return 1
            continue
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(va, vb)))
        ref = math.sqrt(sum(y * y for y in vb))
        err = diff / ref if ref > 0 else diff
        if err > tol:
            print(f"{name}: relative error {err:.3g} > {tol:g}")
            return 1
        worst = max(worst, (err, name))
    print(f"{len(a)} tensors, worst relative error {worst[0]:.2g} ({worst[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
