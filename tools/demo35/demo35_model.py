"""demo35_model.py: the second demo model's definition and forward, shared by training (train_demo35.py)
and the reference (ref_demo35.py), so the reference logits come from the training code's own forward.

Main model: HF transformers' Qwen3.5 text model (Qwen3_5ForCausalLM: Gated DeltaNet layers and gated
full-attention layers, one full-attention layer every FULL_EVERY). MTP block (HF does not build or train
it), as llama.cpp's qwen35 graph_mtp / vLLM's qwen3_5_mtp describe it, predicting token p+2 at position p:
    h_p   = the main model's last hidden state after its final norm (the input of the head)    [B, T, d]
    x_p   = fc(concat(pre_fc_norm_embedding(embed(t_{p+1})), pre_fc_norm_hidden(h_p)))      [B, T, d]
    x     = one gated full-attention decoder layer (HF's own class, causal, RoPE at position p)
    logit = lm_head(norm(x))            shared embedding and head (tied to embed_tokens here)
Parameter names follow the real Qwen3.5 checkpoints (mtp.fc, mtp.pre_fc_norm_embedding,
mtp.pre_fc_norm_hidden, mtp.layers.0.*, mtp.norm), which export_demo35.py maps to llama.cpp's
blk.<n_layer>.nextn.* names."""
import inspect
import sys
import torch
import torch.nn as nn

VOCAB = 8192
FULL_EVERY = 4  # layer i is full attention when (i + 1) % FULL_EVERY == 0 (gantry / llama.cpp rule)
SHAPE = dict(hidden_size=512, intermediate_size=768, num_hidden_layers=8, num_attention_heads=4,
             num_key_value_heads=2, head_dim=128, linear_num_key_heads=4, linear_num_value_heads=4,
             linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4)
ROPE_THETA = 1000000.0
PARTIAL_ROTARY = 0.25


def hf_classes():
    """(CausalLM class, text config class, modeling module) of HF's Qwen3.5 text model, or exit clearly."""
    import transformers
    for lm, cf in (("Qwen3_5ForCausalLM", "Qwen3_5TextConfig"),):
        if hasattr(transformers, lm) and hasattr(transformers, cf):
            cls = getattr(transformers, lm)
            return cls, getattr(transformers, cf), sys.modules[cls.__module__]
    have = [n for n in ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration") if hasattr(transformers, n)]
    sys.exit(f"FATAL: transformers {transformers.__version__} has no Qwen3_5ForCausalLM/Qwen3_5TextConfig "
             f"(it has {have or 'neither Qwen3Next nor Qwen3.5'}). gantry loads arch 'qwen35', which llama.cpp's "
             f"converter writes for Qwen3_5ForCausalLM only (Qwen3-Next is MoE and converts to 'qwen3next').")


def make_config(eos_id, pad_id):
    _, Cfg, _ = hf_classes()
    n = SHAPE["num_hidden_layers"]
    types = ["full_attention" if (i + 1) % FULL_EVERY == 0 else "linear_attention" for i in range(n)]
    cfg = Cfg(vocab_size=VOCAB, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
              tie_word_embeddings=True, attention_bias=False, layer_types=types,
              rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA,
                               "partial_rotary_factor": PARTIAL_ROTARY},
              bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id, **SHAPE)
    # older configs keep these at the top level
    for k, v in (("partial_rotary_factor", PARTIAL_ROTARY), ("rope_theta", ROPE_THETA)):
        if getattr(cfg, k, None) is None:
            setattr(cfg, k, v)
    cfg.use_cache = False
    assert list(cfg.layer_types) == types, f"config did not keep layer_types: {cfg.layer_types}"
    assert cfg.head_dim == SHAPE["head_dim"], f"head_dim {cfg.head_dim}"
    return cfg


class MTP(nn.Module):
    """The MTP block (names as in Qwen3.5 checkpoints, under the prefix 'mtp.')."""

    def __init__(self, cfg):
        super().__init__()
        _, _, mod = hf_classes()
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.full_idx = next(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
        self.pre_fc_norm_embedding = mod.Qwen3_5RMSNorm(d, eps=eps)
        self.pre_fc_norm_hidden = mod.Qwen3_5RMSNorm(d, eps=eps)
        self.fc = nn.Linear(2 * d, d, bias=False)
        # built at a full-attention index so HF makes it a gated full-attention layer
        self.layers = nn.ModuleList([mod.Qwen3_5DecoderLayer(cfg, self.full_idx)])
        self.norm = mod.Qwen3_5RMSNorm(d, eps=eps)
        assert hasattr(self.layers[0], "self_attn"), "MTP layer is not a full-attention layer"


def attach(model):
    """Adds model.mtp and a hook that records the keyword arguments HF passes to its first full-attention
    layer (position_embeddings, attention_mask, ...), which the MTP layer reuses (same positions)."""
    model.mtp = MTP(model.config)
    model._mtp_kw = {}
    target = model.model.layers[model.mtp.full_idx]

    sig = inspect.signature(target.forward)

    def hook(_m, args, kwargs):  # by name, whether HF passed them by position or by keyword
        a = sig.bind_partial(*args, **kwargs).arguments
        extra = {k: v for k, v in a.items() if sig.parameters[k].kind == inspect.Parameter.VAR_KEYWORD}
        model._mtp_kw = {k: v for k, v in a.items() if k not in extra}
        for v in extra.values():
            model._mtp_kw.update(v)
    target.register_forward_pre_hook(hook, with_kwargs=True)
    return model


def main_hidden(model, ids):
    """ids [B, T] -> h [B, T, d], the main model's hidden after its final norm."""
    out = model.model(input_ids=ids, use_cache=False)
    h = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    kw = model._mtp_kw
    assert kw.get("position_embeddings") is not None, "no position_embeddings captured from the full-attention layer"
    return h


def mtp_hidden(model, h, next_ids):
    """h [B, T, d] (main_hidden of ids), next_ids [B, T] (= ids shifted left by one: token p+1 at p)
    -> [B, T, d] MTP hidden after mtp.norm; lm_head of it predicts token p+2. Call right after main_hidden
    on the same ids (it reuses that call's position embeddings and mask)."""
    m = model.mtp
    e = m.pre_fc_norm_embedding(model.model.embed_tokens(next_ids))
    x = m.fc(torch.cat([e, m.pre_fc_norm_hidden(h)], dim=-1))
    kw = {k: v for k, v in model._mtp_kw.items() if k in ("position_embeddings", "attention_mask", "position_ids",
                                                           "cache_position")}
    out = m.layers[0](x, **kw)
    if isinstance(out, tuple):
        out = out[0]
    return m.norm(out)


def forward_both(model, ids, next_ids):
    """-> (main logits [B, T, V], mtp logits [B, T, V])."""
    h = main_hidden(model, ids)
    return model.lm_head(h), model.lm_head(mtp_hidden(model, h, next_ids))
