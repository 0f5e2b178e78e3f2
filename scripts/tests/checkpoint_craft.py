#!/usr/bin/env python3
"""checkpoint_craft.py SRC OUT — writes checkpoints that lie, each made from the real checkpoint
SRC (tp_train --save), into the folder OUT, for scripts/tests/checkpoint.sh:

  ck_bitflip        one bit of transformer.wte.weight flipped (its checksum no longer fits)
  ck_layers_1e6     metadata layers=1000000 (the file has the blocks it was saved with)
  ck_vocab_2e31     metadata vocab=2147483648 (2^31 rows; wte has the real ones)
  ck_heads6         metadata heads=6 (kv_heads stays: c_attn's shape disagrees)
  ck_heads6_kv6     metadata heads=6 and kv_heads=6 (the shapes fit; config_crc32c does not)
  ck_adam0          metadata adam_steps=0 while the moments are those of a trained run
  ck_adam_missing   no adam_steps
  ck_neg_v          -1 inside an exp_avg_sq tensor (its checksum rewritten to fit)
  ck_keys_200k      200 000 extra metadata keys (an 8 MB header), else the same file
  ck_keys_200k_dup  the same with one key written twice at the end
  ck_no_crc         every checksum removed (a checkpoint from before them): loads with a note
"""
import json
import struct
import sys

src, out = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]

# CRC-32C (Castagnoli, reflected 0x82F63B78), bytewise: the tensors here are a few KB.
TABLE = []
for b in range(256):
    c = b
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    TABLE.append(c)


def crc32c(buf):
    c = 0xFFFFFFFF
    for byte in buf:
        c = (c >> 8) ^ TABLE[(c ^ byte) & 0xFF]
    return c ^ 0xFFFFFFFF


def write(name, header, body, text=None):
    if text is None:
        text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(f"{out}/{name}.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + body)


def with_meta(**changes):
    h = json.loads(json.dumps(head))
    for k, v in changes.items():
        if v is None:
            h["__metadata__"].pop(k, None)
        else:
            h["__metadata__"][k] = v
    return h


tensors = sorted((k for k in head if k != "__metadata__"), key=lambda k: head[k]["data_offsets"][0])
first = data[slice(*head[tensors[0]]["data_offsets"])]
assert crc32c(first) == int(head["__metadata__"]["crc32c." + tensors[0]], 16), \
    "this script's CRC-32C differs from the checkpoint's"

b0 = head["transformer.wte.weight"]["data_offsets"][0]
flipped = bytearray(data)
flipped[b0 + 1001] ^= 0x10  # one bit of a weight's mantissa
write("ck_bitflip", head, bytes(flipped))
write("ck_layers_1e6", with_meta(layers="1000000"), data)
write("ck_vocab_2e31", with_meta(vocab=str(2**31)), data)
write("ck_heads6", with_meta(heads="6"), data)
write("ck_heads6_kv6", with_meta(heads="6", kv_heads="6"), data)
write("ck_adam0", with_meta(adam_steps="0"), data)
write("ck_adam_missing", with_meta(adam_steps=None), data)

name = next(k for k in tensors if k.startswith("optimizer.exp_avg_sq."))
lo, hi = head[name]["data_offsets"]
neg = bytearray(data)
neg[lo + 12:lo + 16] = struct.pack("<f", -1.0)
write("ck_neg_v", with_meta(**{"crc32c." + name: "%08x" % crc32c(bytes(neg[lo:hi]))}), bytes(neg))

many = with_meta(**{"k%06d" % i: "v" * 30 for i in range(200000)})  # 8 MB
text = json.dumps(many).encode()
write("ck_keys_200k", None, data, text)
last = b'"k199999": "' + b"v" * 30 + b'"'
write("ck_keys_200k_dup", None, data, text.replace(last, last + b', "k000000": "v"', 1))

h = json.loads(json.dumps(head))
h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if not k.startswith("crc32c.")}
write("ck_no_crc", h, data)
