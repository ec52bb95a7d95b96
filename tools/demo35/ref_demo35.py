"""Reference logits for demo35: the training code's own forward (demo35_model.forward_both: HF Qwen3.5 +
the MTP block) in float32 (TF32 off) on the exact weights of the Q4_K_M GGUF: every tensor is read from
the GGUF (quantized ones dequantized by gguf-py, F32 ones through the inverse of the converter's
transform) and loaded into the HF model through the converter's own name map (MAP.json); needs only
OUTDIR/hf/config.json, MAP.json, OUTDIR/heldout.json, OUTDIR/train_stats.json and the GGUF. Also PyTorch's own bf16/fp16 error against it (the GPU bar) and the
MTP head's teacher-forced acceptance on held-out prompts.
usage: python3 ref_demo35.py OUTDIR KITDIR Q4_K_M.gguf MAP.json
writes OUTDIR/manifest.json and OUTDIR/demo35.logits.f32 (per case: main rows, then MTP rows)."""
import os, sys, json, time, glob
import numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo35_model as D
OUT, KIT, GG, MAPF = sys.argv[1:5]
sys.path.insert(0, KIT + "/gguf-py")
import gguf
T0 = time.time()
torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
hf = os.path.join(OUT, "hf")
Cls, Cfg, mod = D.hf_classes()
# built in float32 from the config (not from_pretrained, whose dtype handling would round the RoPE
# frequencies to bf16 with a bf16 checkpoint), then loaded with the checkpoint's tensors
torch.set_default_dtype(torch.float32)
cfg = Cfg.from_pretrained(hf); cfg.use_cache = False
model = D.attach(Cls(cfg)).float()
re_ = getattr(model.model, "rotary_emb", None)
dim = int(cfg.head_dim * D.PARTIAL_ROTARY)
inv = 1.0 / (D.ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
if re_ is not None and getattr(re_, "inv_freq", None) is not None and re_.inv_freq.shape == inv.shape:
    print(f"rotary inv_freq max rel diff from the fp32 formula: {((re_.inv_freq.float() - inv).abs() / inv).max().item():.1e}", flush=True)
else:
    print("note: could not check the rotary frequencies", flush=True)
model = model.float().cuda().eval()
# the torch GDN path (fp32 throughout) where the module lets us choose; print what runs
for m in model.modules():
    for a, fn in (("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"), ("recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule")):
        if hasattr(m, a) and hasattr(mod, fn): setattr(m, a, getattr(mod, fn))
    if hasattr(m, "causal_conv1d_fn"): m.causal_conv1d_fn = None
    if hasattr(m, "causal_conv1d_update"): m.causal_conv1d_update = None

# ---------------------------------------------------------------- the GGUF's weights into the model
# Every parameter comes from the GGUF: quantized tensors dequantized by gguf-py; F32 tensors through
# the inverse of the converter's transform (norms: stored 1 + w, except ssm_norm; ssm_a = -exp(A_log);
# conv1d squeezed; dt_bias as is). gguf_map.json (written by export_demo35.py) names each one's HF param.
params = dict(model.named_parameters())
emb = params["model.embed_tokens.weight"]
assert model.lm_head.weight.data_ptr() == emb.data_ptr(), "lm_head is not tied to embed_tokens"
hf_of = {g: h for h, g in json.load(open(MAPF)).items()}
rd = gguf.GGUFReader(GG)
types, n_deq, done = {}, 0, set()
for t in rd.tensors:
    types[t.name] = t.tensor_type.name
    h = hf_of.get(t.name)
    assert h is not None and h in params, f"GGUF tensor {t.name} has no HF parameter ({h})"
    p = params[h]
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        w = torch.from_numpy(np.array(t.data, dtype=np.float32).reshape(-1).copy())
        if t.name.endswith(".ssm_a"):
            assert (w < 0).all(), f"{t.name} holds non-negative values"
            w = torch.log(-w)
        elif t.name.endswith("norm.weight") and not t.name.endswith("ssm_norm.weight"):
            w = w - 1
    else:
        assert p.dim() == 2, f"{t.name} ({t.tensor_type.name}) maps to {h} of shape {tuple(p.shape)}"
        w = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
        n_deq += 1
    assert w.numel() == p.numel(), f"{t.name}: {w.numel()} values, HF {h} {tuple(p.shape)}"
    with torch.no_grad(): p.copy_(w.reshape(p.shape))
    done.add(h)
left = set(params) - done
assert not left, f"parameters the GGUF does not hold: {sorted(left)}"
print(f"loaded all {len(done)} parameters from the GGUF ({n_deq} dequantized) at {time.time()-T0:.0f}s", flush=True)

from tokenizers import Tokenizer
tok = Tokenizer.from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "demo35", "hf", "tokenizer.json"))
enc = lambda s: tok.encode(s, add_special_tokens=False).ids
dev = "cuda"
def both(ids):
    """ids list -> (main logits [L, V], mtp logits [L-1, V]: row p drafts token p+2), fp32 numpy."""
    x = torch.tensor([ids], device=dev)
    with torch.no_grad():
        main = model.lm_head(D.main_hidden(model, x))[0].float()
        _, mt = D.forward_both(model, x[:, :-1], x[:, 1:])
    return main.cpu().numpy(), mt[0].float().cpu().numpy()
def greedy(ids, n):
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids], device=dev)
            ids.append(int(model.lm_head(D.main_hidden(model, x))[0, -1].argmax()))
    return ids
def rel(a, b): return float(np.sqrt(((a - b) ** 2).sum(-1) / (b ** 2).sum(-1)).max())

PROMPTS = ["def fibonacci(n):\n",
           "import json\nimport os\n\n\ndef load_config(path):\n    \"\"\"Load a JSON config file.\"\"\"\n",
           "# Original version:\ndef area(width, height):\n    total = width * height\n    if total < 0:\n"
           "        raise ValueError(total)\n    return total\n\n# Refactored version (total renamed to new_total):\n"]
GEN, KEEP = 48, int(os.environ.get("DEMO35_KEEP", "16"))  # rows kept per case: 16 x 3 cases x 2 heads x 8192 x 4 B = 3.1 MB
cases, blobs, row0 = [], [], 0
sd32 = {k: v.detach().clone() for k, v in model.state_dict().items()}  # to undo the reduced-precision runs
bf32 = {k: v.detach().clone() for k, v in model.named_buffers()}     # (RoPE frequencies are buffers)
for i, p in enumerate(PROMPTS):
    ids = enc(p)
    g = greedy(ids, GEN)
    main, mt = both(g)
    L = len(g)
    assert main.shape == (L, D.VOCAB) and mt.shape == (L - 1, D.VOCAB)
    srt = np.sort(main, -1); marg = srt[:, -1] - srt[:, -2]
    am, at = main.argmax(-1), mt.argmax(-1)
    gen_rows = range(len(ids) - 1, L - 2)  # MTP row p drafts token p+2 = main's argmax at row p+1
    acc = sum(int(at[p] == am[p + 1]) for p in gen_rows) / len(gen_rows)
    c = {"text": p, "prompt_ids": ids, "generated_ids": g[len(ids):], "all_ids": g,
         "logits_file": f"demo35.case{i}.logits.f32", "logits_shape": [KEEP, D.VOCAB], "logits_first_row": L - KEEP,
         "mtp_logits_file": f"demo35.case{i}.mtp.logits.f32", "mtp_logits_shape": [KEEP, D.VOCAB],
         "mtp_logits_first_row": L - 1 - KEEP,
         "generated_text": tok.decode(g[len(ids):]), "min_top1_margin_over_generated": float(marg[len(ids) - 1:-1].min()),
         "mtp_accept_vs_main_greedy": acc, "blob_row": row0}
    blobs += [main[L - KEEP:], mt[L - 1 - KEEP:]]; row0 += 2 * KEEP
    for dt in (torch.bfloat16, torch.float16):
        model.to(dt)
        a, b = both(g)
        nm = str(dt)[6:]
        c[f"noise_floor_{nm}"] = rel(a, main); c[f"top1_agree_{nm}"] = f"{int((a.argmax(-1) == am).sum())}/{L}"
        c[f"mtp_noise_floor_{nm}"] = rel(b, mt); c[f"mtp_top1_agree_{nm}"] = f"{int((b.argmax(-1) == at).sum())}/{L - 1}"
        model.float(); model.load_state_dict(sd32)
        with torch.no_grad():
            for k, v in model.named_buffers(): v.copy_(bf32[k])
    cases.append(c)
    print(json.dumps({k: v for k, v in c.items() if k not in ("prompt_ids", "all_ids", "generated_ids")}, ensure_ascii=False), flush=True)
np.concatenate(blobs).astype("<f4").tofile(os.path.join(OUT, "demo35.logits.f32"))

# MTP acceptance on held-out prompts (the model's own greedy continuation, teacher-forced)
held = json.load(open(os.path.join(OUT, "heldout.json")))
acc = {}
for kind in ("completion", "edit"):
    hit = tot = 0
    for h in held[kind][:8]:
        if time.time() - T0 > float(os.environ.get("REF_BUDGET_S", "150")): break
        ids = enc(h["prompt"])[-384:]
        g = greedy(ids, 64)
        main, mt = both(g)
        am, at = main.argmax(-1), mt.argmax(-1)
        for p in range(len(ids) - 1, len(g) - 2):
            hit += int(at[p] == am[p + 1]); tot += 1
    acc[kind] = {"accepted": hit, "drafted": tot, "rate": hit / tot if tot else None}
print("MTP top-1 acceptance on held-out prompts (1 draft, greedy): " + json.dumps(acc), flush=True)
stats = json.load(open(os.path.join(OUT, "train_stats.json")))
json.dump({"model": os.path.basename(GG), "tensor_types": types, "train": stats, "mtp_heldout_acceptance": acc,
           "reference": "fp32 (TF32 off) forward of tools/demo35/demo35_model.py on the dequantized GGUF weights",
           "cases": cases}, open(os.path.join(OUT, "manifest.json"), "w"), indent=1, ensure_ascii=False)
print(f"reference done at {time.time()-T0:.0f}s", flush=True)
