"""Tiny Hugging Face architectures, built offline from configs with random
weights: for each, a config, the model class and example inputs."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

VOCAB = 96
SEQ = 10
BATCH = 2

DEC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)
ENC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           vocab_size=VOCAB, max_position_embeddings=64)

# kind: "causal" (causal LM: generate too), "encoder", "seq2seq", "vision",
# "clip" (text+image), "whisper"
SPECS = {
    "llama": ("causal", dict(DEC, head_dim=8)),
    "qwen3": ("causal", dict(DEC, head_dim=8)),
    "qwen2": ("causal", dict(DEC)),
    "mistral": ("causal", dict(DEC, head_dim=8)),
    "gemma": ("causal", dict(DEC, head_dim=8)),
    "gemma2": ("causal", dict(DEC, head_dim=8, sliding_window=8)),
    "phi3": ("causal", dict(DEC, pad_token_id=0)),
    "mixtral": ("causal", dict(DEC, head_dim=8, num_local_experts=4, num_experts_per_tok=2)),
    "qwen3_moe": ("causal", dict(DEC, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, decoder_sparse_step=1)),
    "gpt2": ("causal", dict(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64)),
    "gpt_neox": ("causal", dict(ENC, rotary_pct=0.5)),
    "gptj": ("causal", dict(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64,
                            rotary_dim=4)),
    "opt": ("causal", dict(hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
                           vocab_size=VOCAB, max_position_embeddings=64, word_embed_proj_dim=32)),
    "bloom": ("causal", dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=VOCAB)),
    "falcon": ("causal", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              vocab_size=VOCAB, new_decoder_architecture=False,
                              multi_query=True)),
    "starcoder2": ("causal", dict(DEC)),
    "bert": ("encoder", dict(ENC)),
    "roberta": ("encoder", dict(ENC, pad_token_id=1)),
    "deberta-v2": ("encoder", dict(ENC, relative_attention=True, position_buckets=8,
                                   pos_att_type=["p2c", "c2p"])),
    "distilbert": ("encoder", dict(dim=32, hidden_dim=64, n_layers=2, n_heads=4, vocab_size=VOCAB,
                                   max_position_embeddings=64)),
    "modernbert": ("encoder", dict(ENC, global_attn_every_n_layers=2, local_attention=8,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                   cls_token_id=1, sep_token_id=2)),
    "t5": ("seq2seq", dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                           vocab_size=VOCAB, decoder_start_token_id=0)),
    "bart": ("seq2seq", dict(d_model=32, encoder_layers=2, decoder_layers=2,
                             encoder_attention_heads=4, decoder_attention_heads=4,
                             encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB,
                             max_position_embeddings=64)),
    "whisper": ("whisper", dict(d_model=32, encoder_layers=2, decoder_layers=2,
                                encoder_attention_heads=4, decoder_attention_heads=4,
                                encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB,
                                num_mel_bins=16, max_source_positions=16,
                                max_target_positions=32, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2, decoder_start_token_id=1)),
    "vit": ("vision", dict(ENC, image_size=16, patch_size=4, num_channels=3)),
    "convnext": ("vision", dict(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1],
                                num_stages=2, image_size=32)),
    "swin": ("vision", dict(image_size=32, patch_size=4, num_channels=3, embed_dim=8,
                            depths=[1, 1], num_heads=[2, 2], window_size=4)),
    "resnet": ("vision", dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                              depths=[1, 1], layer_type="basic")),
    "clip": ("clip", dict(text_config=dict(ENC, max_position_embeddings=16),
                          vision_config=dict(ENC, image_size=16, patch_size=4),
                          projection_dim=16)),
    "siglip": ("clip", dict(text_config=dict(ENC, max_position_embeddings=16),
                            vision_config=dict(ENC, image_size=16, patch_size=4))),
}

# The fast part run by `make test`.
FAST = ["llama", "gpt2", "bert", "t5", "vit"]


def build(name):
    """(model, inputs: dict of CPU tensors, kind) with fixed random weights."""
    from transformers import (AutoConfig, AutoModel, AutoModelForCausalLM,
                              AutoModelForImageClassification, AutoModelForMaskedLM,
                              AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq)
    kind, kwargs = SPECS[name]
    config = AutoConfig.for_model(name, **kwargs)
    # No dropout: a training step must be comparable with CPU's.
    subs = [getattr(config, k, None) for k in ("text_config", "vision_config")]
    for cfg in [config] + [c for c in subs if c is not None]:
        for key, value in list(vars(cfg).items()):
            if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
                setattr(cfg, key, 0.0)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind == "causal":
        model = AutoModelForCausalLM.from_config(config)
        inputs = {"input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)}
    elif kind == "encoder":
        model = AutoModelForMaskedLM.from_config(config)
        inputs = {"input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=g),
                  "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long)}
        inputs["attention_mask"][1, -3:] = 0
    elif kind == "seq2seq":
        model = AutoModelForSeq2SeqLM.from_config(config)
        inputs = {"input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=g),
                  "decoder_input_ids": torch.randint(3, VOCAB, (BATCH, 6), generator=g)}
    elif kind == "whisper":
        model = AutoModelForSpeechSeq2Seq.from_config(config)
        inputs = {"input_features": torch.randn(BATCH, 16, 32, generator=g),
                  "decoder_input_ids": torch.randint(3, VOCAB, (BATCH, 6), generator=g)}
    elif kind == "vision":
        model = AutoModelForImageClassification.from_config(config)
        size = kwargs.get("image_size", 32)
        inputs = {"pixel_values": torch.randn(BATCH, 3, size, size, generator=g)}
    else:  # clip / siglip
        model = AutoModel.from_config(config)
        inputs = {"input_ids": torch.randint(3, VOCAB, (BATCH, 8), generator=g),
                  "pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g)}
    return model, inputs, kind


def first_output(out):
    """The main tensor of a model output."""
    for key in ("logits", "logits_per_image", "last_hidden_state"):
        v = getattr(out, key, None)
        if isinstance(v, torch.Tensor):
            return v
    return out[0]


def loss_of(out):
    """A scalar loss from an output (sum of squares of the main output)."""
    return first_output(out).float().square().mean()
