#!/usr/bin/env python3
"""scripts/gpu/embed_ref.py MODEL.gguf HF_CONFIG_DIR OUT_DIR — HF's Qwen3-Embedding reference for
gantry's --task embed: transformers' Qwen3Model (config from HF_CONFIG_DIR/config.json) loaded
with the weights MODEL.gguf holds (F32 / BF16 tensors only; llama.cpp names, no permutation for
qwen3), run in float32 on a few fixed token-id inputs; the embedding is the final-norm hidden
state of the last token (last_hidden_state[:, -1], Qwen3-Embedding's last-token pooling),
L2-normalized. Writes OUT_DIR/embed_ref.json {"model", "cases": [{"ids", "file", "dim"}]} and one
OUT_DIR/embed_ref.caseK.f32 (float32 [dim]) per case. Needs torch + transformers (no network).
Check against gantry: GANTRY_EMBED_REF=OUT_DIR ctest -R test_embed (tolerance 1e-3, the CPU
golden one)."""
import json
import os
import struct
import sys

import numpy as np
import torch
from transformers import Qwen3Config, Qwen3Model

# inputs: token ids < 1024 (qwen3-tiny's vocabulary); the last one ends with EOS as a text input
# would (tokenizer.ggml.add_eos_token)
CASES = [[9, 17, 33, 71, 5], [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 11, 12, 13],
         [42], list(range(3, 70, 3))]

TYPES = {0: ("f32", 4), 30: ("bf16", 2)}


def read_gguf(path):
    """{name: np.float32 array of shape (rows, cols) or (n,)} for F32 / BF16 tensors."""
    f = open(path, "rb")
    buf = f.read()
    off = [0]

    def take(fmt):
        v = struct.unpack_from("<" + fmt, buf, off[0])
        off[0] += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        n = take("Q")
        s = buf[off[0]:off[0] + n].decode("utf-8", "replace")
        off[0] += n
        return s

    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scal[t])

    assert buf[:4] == b"GGUF", "not a GGUF file"
    off[0] = 4
    _ver, n_t, n_kv = take("I"), take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    data0 = (off[0] + align - 1) // align * align
    out = {}
    for name, ne, t, o in infos:
        if t not in TYPES:
            raise SystemExit(f"{name}: tensor type {t} is not F32/BF16 (use the bf16 fixture)")
        n = int(np.prod(ne))
        start = data0 + o
        if t == 0:
            a = np.frombuffer(buf, dtype="<f4", count=n, offset=start).copy()
        else:
            a = (np.frombuffer(buf, dtype="<u2", count=n, offset=start).astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(list(reversed(ne))) if len(ne) > 1 else a
    return kv, out


def hf_name(g):
    if g == "token_embd.weight":
        return "embed_tokens.weight"
    if g == "output_norm.weight":
        return "norm.weight"
    if g == "output.weight":
        return None  # the head: not part of Qwen3Model
    p = g.split(".")
    m = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    return f"layers.{p[1]}.{m[p[2]]}.weight"


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    gguf, hf_dir, out = argv[1:]
    os.makedirs(out, exist_ok=True)
    _kv, t = read_gguf(gguf)
    cfg = Qwen3Config.from_json_file(os.path.join(hf_dir, "config.json"))
    cfg.torch_dtype = torch.float32
    model = Qwen3Model(cfg).to(torch.float32).eval()
    sd = {}
    for g, a in t.items():
        h = hf_name(g)
        if h:
            sd[h] = torch.from_numpy(a)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary" not in m]
    if missing or unexpected:
        raise SystemExit(f"weights: missing {missing} unexpected {unexpected}")
    man = {"model": os.path.basename(gguf), "cases": []}
    with torch.no_grad():
        for k, ids in enumerate(CASES):
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].double()
            e = (h / h.norm()).float().numpy()
            name = f"embed_ref.case{k}.f32"
            e.astype("<f4").tofile(os.path.join(out, name))
            man["cases"].append({"ids": ids, "file": name, "dim": int(e.shape[0])})
            print(f"case {k}: {len(ids)} tokens  dim {e.shape[0]}  first {e[:3].tolist()}")
    with open(os.path.join(out, "embed_ref.json"), "w") as f:
        json.dump(man, f, indent=1)
    print(f"wrote {len(CASES)} cases to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
