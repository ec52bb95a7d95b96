"""Unpacks what scripts/gpu/train_demo35.sh returned into tests/golden/demo35/ (python3 stdlib only):
the Q4_K_M GGUF (joined from .partNN when it was split), manifest.json with per-case logits files
(demo35.caseN.logits.f32: main head, last KEEP (16) rows; demo35.caseN.mtp.logits.f32: MTP head, last KEEP
rows), heldout.json and the held-out prompts as text files (prompts/edit_NN.txt, completion_NN.txt),
hf/config.json and train.log's training lines.
SRC_DIR holds train.log, the GGUF (or its parts), demo35.tar and, from scripts/gpu/ref_demo35.sh,\ndemo35ref.tar (its manifest.json and demo35.logits.f32 replace demo35.tar's).\nusage: python3 unpack_demo35.py SRC_DIR DEST_DIR"""
import glob, io, json, os, shutil, sys, tarfile

SRC, DEST = sys.argv[1], sys.argv[2]
NAME = "gantry-demo35-code"
os.makedirs(os.path.join(DEST, "prompts"), exist_ok=True)
os.makedirs(os.path.join(DEST, "hf"), exist_ok=True)
tf = tarfile.open(os.path.join(SRC, "demo35.tar"))
get = lambda n: tf.extractfile("./" + n).read()
# the reference: from the rerun (scripts/gpu/ref_demo35.sh: demo35ref.tar) when there is one
rp = os.path.join(SRC, "demo35ref.tar")
rt = tarfile.open(rp) if os.path.exists(rp) else tf
man = json.loads(rt.extractfile("./manifest.json").read())
blob = rt.extractfile("./demo35.logits.f32").read()
stats = man["train"]
params = stats["params_main"] + stats["params_mtp"]
model = f"{NAME}-{round(params / 1e6)}m.Q4_K_M.gguf"
parts = sorted(glob.glob(os.path.join(SRC, f"{NAME}.Q4_K_M.gguf.part*")))
srcs = parts or [os.path.join(SRC, f"{NAME}.Q4_K_M.gguf")]
with open(os.path.join(DEST, model), "wb") as out:
    for p in srcs:
        out.write(open(p, "rb").read())
V = man["cases"][0]["logits_shape"][1]
for c in man["cases"]:
    r0, keep = c.pop("blob_row"), c["logits_shape"][0]
    assert c["mtp_logits_shape"][0] == keep
    row = 4 * V
    open(os.path.join(DEST, c["logits_file"]), "wb").write(blob[r0 * row:(r0 + keep) * row])
    open(os.path.join(DEST, c["mtp_logits_file"]), "wb").write(blob[(r0 + keep) * row:(r0 + 2 * keep) * row])
    assert len(blob) >= (r0 + 2 * keep) * row, "logits blob too short"
man["model"] = model
json.dump(man, open(os.path.join(DEST, "manifest.json"), "w"), indent=1, ensure_ascii=False)
held = json.loads(get("heldout.json"))
json.dump(held, open(os.path.join(DEST, "heldout.json"), "w"), indent=1, ensure_ascii=False)
for kind in ("edit", "completion"):
    for i, h in enumerate(held[kind][:8]):
        open(os.path.join(DEST, "prompts", f"{kind}_{i:02d}.txt"), "w").write(h["prompt"])
open(os.path.join(DEST, "hf", "config.json"), "wb").write(get("hf/config.json"))
log = open(os.path.join(SRC, "train.log"), errors="replace").read().splitlines()
keep = [l for l in log if not l.startswith(("[", "INFO:", "WARNING:"))]
open(os.path.join(DEST, "train.log"), "w").write("\n".join(keep[:400]) + "\n")
print(f"{model}: {os.path.getsize(os.path.join(DEST, model))} bytes; {len(man['cases'])} cases; "
      f"{len(held['edit'])} edit / {len(held['completion'])} completion held-out prompts")
