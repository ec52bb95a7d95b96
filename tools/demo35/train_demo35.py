"""Train gantry's second demo model: a small Qwen3.5 (Gated DeltaNet + gated attention) Python-code model
with an MTP block, on the Python sources installed on the training machine, with today's demo tokenizer.
usage: python3 train_demo35.py OUTDIR TOKDIR SECONDS
OUTDIR/hf: HF checkpoint (bf16, with mtp.* tensors) + tokenizer; OUTDIR/heldout.json: held-out prompts."""
import os, sys, glob, json, time, math, random, hashlib, re, ast, site
import torch, torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo35_model as D

OUT, TOKDIR, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
MTP_W = 0.3
os.makedirs(OUT, exist_ok=True); random.seed(0); torch.manual_seed(0)
T0 = time.time()
from tokenizers import Tokenizer
tok = Tokenizer.from_file(os.path.join(TOKDIR, "tokenizer.json"))
assert tok.get_vocab_size() == D.VOCAB, f"tokenizer has {tok.get_vocab_size()} tokens, want {D.VOCAB}"
EOT, EOS = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
assert EOT is not None and EOS is not None, "tokenizer lacks the Qwen special tokens"

# ---------------------------------------------------------------- corpus (held-out files by path hash)
roots = [p for p in site.getsitepackages() + ["/opt/torch/.venv/lib/python3.12/site-packages"] if os.path.isdir(p)]
roots = sorted(set(os.path.realpath(p) for p in roots))
files = sorted(set(f for r in roots for f in glob.glob(r + "/**/*.py", recursive=True)))
print(f"site-packages roots {roots}: {len(files)} .py files", flush=True)
random.shuffle(files)
def held(f):  # ~2% of files never seen in training
    return hashlib.md5(os.path.basename(os.path.dirname(f)).encode() + b"/" + os.path.basename(f).encode()).digest()[0] < 5
docs, held_docs, total = [], [], 0
for f in files:
    if "/tests/" in f or "/test_" in f: continue
    try: t = open(f, encoding="utf-8").read()
    except Exception: continue
    if not 200 < len(t) < 200_000: continue
    if held(f):
        held_docs.append((f, t)); continue
    if total < 80_000_000:
        docs.append(t); total += len(t)
    if total >= 80_000_000 and len(held_docs) >= 60: break
print(f"corpus: {len(docs)} files, {total/1e6:.0f} MB; held out {len(held_docs)} files", flush=True)

# ---------------------------------------------------------------- edit pairs (the edit workload's format)
def functions(src, lo=8, hi=40):
    try: tree = ast.parse(src)
    except Exception: return []
    lines, out = src.split("\n"), []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and getattr(n, "end_lineno", None):
            if lo <= n.end_lineno - n.lineno + 1 <= hi and n.col_offset == 0:
                body = "\n".join(lines[n.lineno - 1:n.end_lineno])
                names = [a.arg for a in n.args.args if a.arg not in ("self", "cls")]
                names += [x.id for x in ast.walk(n) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)]
                cnt = {k: len(re.findall(r"\b%s\b" % re.escape(k), body)) for k in set(names) if len(k) > 2}
                cand = sorted([k for k, c in cnt.items() if c >= 3])
                if cand: out.append((body, cand))
    return out
def edit_pair(body, cand, rng):
    old = rng.choice(cand); new = rng.choice(["new_", "my_", "the_"]) + old
    head = f"# Original version:\n{body}\n\n# Refactored version ({old} renamed to {new}):\n"
    return head, re.sub(r"\b%s\b" % re.escape(old), new, body)
rng = random.Random(1); pairs = []
t1 = time.time()
for t in docs:
    for body, cand in functions(t):
        if rng.random() < 0.5:
            h, a = edit_pair(body, cand, rng); pairs.append(h + a + "\n")
    if len(pairs) >= 2500 or time.time() - t1 > 25: break
docs += pairs
print(f"edit pairs added to training: {len(pairs)} ({sum(map(len, pairs))/1e6:.1f} MB) in {time.time()-t1:.0f}s", flush=True)

# held-out prompts: completion (start of a function) and edit (original + refactor header)
rng = random.Random(2); comp, edits = [], []
for f, t in held_docs:
    fs = functions(t, 10, 40)
    if not fs: continue
    body, cand = fs[0]
    ls = body.split("\n"); k = max(3, len(ls) // 3)
    if len(comp) < 16: comp.append({"file": os.path.relpath(f, roots[0]) if f.startswith(roots[0]) else f,
                                     "prompt": "\n".join(ls[:k]) + "\n", "reference": "\n".join(ls[k:]) + "\n"})
    if len(edits) < 16:
        h, a = edit_pair(body, cand, rng)
        edits.append({"file": os.path.relpath(f, roots[0]) if f.startswith(roots[0]) else f, "prompt": h, "reference": a + "\n"})
json.dump({"completion": comp, "edit": edits}, open(os.path.join(OUT, "heldout.json"), "w"), indent=1)
print(f"held-out prompts: {len(comp)} completion, {len(edits)} edit", flush=True)

t1 = time.time(); ids = []
for enc in tok.encode_batch(docs):
    ids.extend(enc.ids); ids.append(EOT)
data = torch.tensor(ids, dtype=torch.int32)
print(f"tokens: {len(ids)/1e6:.1f} M ({sum(map(len, docs))/len(ids):.2f} chars/token), tokenized in {time.time()-t1:.0f}s", flush=True)

# ---------------------------------------------------------------- model
Cls, _, _ = D.hf_classes()
import transformers
cfg = D.make_config(EOS, EOT)
model = D.attach(Cls(cfg)).cuda()
with torch.no_grad():
    for mod in model.mtp.modules():
        if isinstance(mod, torch.nn.Linear): mod.weight.normal_(0.0, getattr(cfg, "initializer_range", 0.02))
n_main = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("mtp."))
n_mtp = sum(p.numel() for p in model.mtp.parameters())
print(f"transformers {transformers.__version__}, torch {torch.__version__}, attn {getattr(cfg, '_attn_implementation', '?')}; "
      f"params: main {n_main/1e6:.1f} M (tied head), mtp {n_mtp/1e6:.2f} M", flush=True)
try:
    import fla; print("flash-linear-attention", getattr(fla, "__version__", "?"), "present", flush=True)
except Exception:
    print("flash-linear-attention absent: HF's torch GDN path", flush=True)

# causality self-check of the MTP path (a non-causal mask would make its drafts worthless)
with torch.no_grad():
    a = torch.randint(0, D.VOCAB, (1, 17), device="cuda"); b = a.clone(); b[0, -1] = (a[0, -1] + 1) % D.VOCAB
    la = D.forward_both(model, a[:, :-1], a[:, 1:]); lb = D.forward_both(model, b[:, :-1], b[:, 1:])
    dm = (la[1][0, :-1] - lb[1][0, :-1]).abs().max().item(); dl = (la[1][0, -1] - lb[1][0, -1]).abs().max().item()
    assert dm < 1e-4 and dl > 0, f"MTP path is not causal: earlier rows moved by {dm}, last by {dl}"
print(f"MTP causality check ok (earlier rows moved {dm:.1e}, last {dl:.1e})", flush=True)

torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True
opt = torch.optim.AdamW(model.parameters(), lr=1.5e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
B, T = 64, 512
n_val = 1_000_000; val, train = data[:n_val].cuda(), data[n_val:].cuda()
def batch(src):
    ix = torch.randint(0, len(src) - T - 2, (B,), device="cuda")
    s = torch.stack([src[i:i + T + 2] for i in ix]).long()
    return s[:, :T], s[:, 1:T + 1], s[:, 2:T + 2]
def losses(x, y1, y2):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lm, lt = D.forward_both(model, x, y1)
    return (F.cross_entropy(lm.float().view(-1, D.VOCAB), y1.reshape(-1)),
            F.cross_entropy(lt.float().view(-1, D.VOCAB), y2.reshape(-1)))
# the whole call has a wall-clock limit: training ends by END_S seconds after this script started
SECS = max(60.0, min(SECS, float(os.environ.get("END_S", "1e9")) - (time.time() - T0)))
print(f"setup done at {time.time()-T0:.0f}s; training for {SECS:.0f}s", flush=True)
start = time.time(); step = 0; warm = 100
while True:
    el = time.time() - start
    if el > SECS: break
    lr = 1.5e-3 * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, el / SECS))))
    for g in opt.param_groups: g["lr"] = lr
    l1, l2 = losses(*batch(train))
    loss = l1 + MTP_W * l2
    opt.zero_grad(set_to_none=True); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
    if step % 100 == 0 or step in (1, 10):
        torch.cuda.synchronize(); el = time.time() - start
        print(f"step {step} t={el:.0f}s main {l1.item():.3f} mtp {l2.item():.3f} lr {lr:.2e} "
              f"{(step + 1) * B * T / max(el, 1e-3) / 1e3:.0f} k tok/s", flush=True)
    step += 1
model.eval()
with torch.no_grad():
    v1, v2 = zip(*[(a.item(), b.item()) for a, b in (losses(*batch(val)) for _ in range(10))])
stats = {"steps": step, "train_tokens": step * B * T, "train_seconds": round(time.time() - start), "batch": [B, T],
         "val_loss_main": sum(v1) / len(v1), "val_loss_mtp": sum(v2) / len(v2), "mtp_loss_weight": MTP_W,
         "corpus_mb": round(total / 1e6), "corpus_tokens": len(ids), "edit_pairs": len(pairs),
         "params_main": n_main, "params_mtp": n_mtp, "transformers": transformers.__version__, "torch": torch.__version__}
print("done: " + json.dumps(stats), flush=True)

# ---------------------------------------------------------------- save (bf16, like the demo)
hf = os.path.join(OUT, "hf"); os.makedirs(hf, exist_ok=True)
model = model.to(torch.bfloat16)
mtp_sd = {"mtp." + k: v.detach().contiguous().cpu() for k, v in model.mtp.state_dict().items()}
del model.mtp
model.config.architectures = ["Qwen3_5ForCausalLM"]
model.save_pretrained(hf, safe_serialization=True)
from safetensors.torch import load_file, save_file
parts = sorted(glob.glob(os.path.join(hf, "model*.safetensors")))
assert len(parts) == 1, f"expected one safetensors file, got {parts}"
sd = load_file(parts[0]); sd.update(mtp_sd); save_file(sd, parts[0], metadata={"format": "pt"})
c = json.load(open(os.path.join(hf, "config.json")))
c["mtp_num_hidden_layers"] = 1; c["full_attention_interval"] = D.FULL_EVERY
json.dump(c, open(os.path.join(hf, "config.json"), "w"), indent=2)
for fn in ("tokenizer.json", "tokenizer_config.json"):
    open(os.path.join(hf, fn), "wb").write(open(os.path.join(TOKDIR, fn), "rb").read())
json.dump(stats, open(os.path.join(OUT, "train_stats.json"), "w"), indent=1)
print(f"saved {hf}: {len(sd)} tensors ({len(mtp_sd)} mtp) at {time.time()-T0:.0f}s", flush=True)
