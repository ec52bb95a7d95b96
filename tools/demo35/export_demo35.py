"""Export the demo35 HF checkpoint to GGUF with llama.cpp's own convert_hf_to_gguf.py (from KITDIR, with
its gguf-py), adding the MTP block the converter's Qwen3.5 class skips, in llama.cpp's nextn layout (as its
converter does for other MTP models, e.g. ExaoneMoE / GLM-4.5):
  block_count = num_hidden_layers + 1, {arch}.nextn_predict_layers = 1, MTP block = blk.<num_hidden_layers>:
  mtp.fc -> nextn.eh_proj, mtp.pre_fc_norm_embedding -> nextn.enorm, mtp.pre_fc_norm_hidden -> nextn.hnorm,
  mtp.norm -> nextn.shared_head_norm, mtp.layers.0.* -> the block's attn_* / ffn_* / norms.
No nextn.embed_tokens / nextn.shared_head_head: the block shares token_embd and the (tied) head.
usage: python3 export_demo35.py HFDIR KITDIR OUT.gguf MAP.json
MAP.json: {hf tensor name: gguf tensor name}, which ref_demo35.py uses to load the GGUF's weights back."""
import sys, json
HF, KIT, OUTF, MAPF = sys.argv[1:5]
sys.path.insert(0, KIT + "/gguf-py"); sys.path.insert(0, KIT)
import gguf
import convert_hf_to_gguf as c

T = gguf.MODEL_TENSOR
lst = gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN35]
for t in (T.NEXTN_EH_PROJ, T.NEXTN_ENORM, T.NEXTN_HNORM, T.NEXTN_SHARED_HEAD_NORM):
    if t not in lst:
        lst.append(t)
c.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"  # as today's demo (and the fixtures)

M = c.Qwen3_5TextModel
_init, _params, _modify = M.__init__, M.set_gguf_parameters, M.modify_tensors
REN = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm", "norm": "shared_head.norm"}
names = {}


def __init__(self, *a, **k):
    _init(self, *a, **k)
    self.n_main = int(self.hparams["num_hidden_layers"])
    self.n_mtp = int(self.hparams.get("mtp_num_hidden_layers", 0))
    assert self.n_mtp == 1, f"expected one MTP layer, config says {self.n_mtp}"
    self.block_count = self.n_main + self.n_mtp
    self.tensor_map = gguf.get_tensor_name_map(self.model_arch, self.block_count)


def set_gguf_parameters(self):
    _params(self)
    self.gguf_writer.add_nextn_predict_layers(self.n_mtp)


def modify_tensors(self, data, name, bid):
    hf_name = name
    if name.startswith("mtp."):
        b = self.n_main
        if name.startswith("mtp.layers.0."):
            name = f"model.layers.{b}." + name[len("mtp.layers.0."):]
        else:
            stem, suf = name[len("mtp."):].rsplit(".", 1)
            name = f"model.layers.{b}.{REN[stem]}.{suf}"
        bid = b
    for new_name, t in _modify(self, data, name, bid):
        names.setdefault(hf_name, []).append(new_name)
        yield new_name, t


M.__init__, M.set_gguf_parameters, M.modify_tensors = __init__, set_gguf_parameters, modify_tensors
sys.argv = ["convert", HF, "--outfile", OUTF, "--outtype", "bf16"]
c.main()
assert any(v[0].endswith("nextn.eh_proj.weight") for v in names.values()), "no nextn.eh_proj written"
for k, v in names.items():
    assert len(v) == 1, f"{k} became {v}"
json.dump({k: v[0] for k, v in names.items()}, open(MAPF, "w"), indent=1)
print(f"exported {len(names)} tensors to {OUTF}", flush=True)
