# Measure bytes saved for backward per decoder layer, in units of s*b*h: the source of
# selector/sizing/activations.py SAVED_PER_SBH. Run in a throwaway venv, never the project's:
#   python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch transformers peft
#   /tmp/tv/bin/python scripts/measure_saved_activations.py [--fp32-adapters]   (CPU, minutes)
# --fp32-adapters keeps PEFT's default fp32 adapters (the LORA "fp32" lines); on CPU a dropout mask
# is saved in the input's dtype (4 B for fp32 adapters), on CUDA as 1-byte bool: the lines subtract
# the difference per dropout.
# Measured 2026-12-05 with torch 2.13.0+cpu, transformers 5.25.0, peft 0.21.2.
# Uses real HF transformers LlamaForCausalLM + PEFT LoRA, bf16, CPU.
# Method: torch.autograd.graph.saved_tensors_hooks pack hook records each saved tensor's
# untyped storage (data_ptr, nbytes); each storage counted once; parameter storages excluded.
# Per-layer cost = (S(L=3) - S(L=2))  [steady-state layer],  first layer = S(1) - S(0).
import collections
import json
import sys

import peft
import torch
import torch.nn as nn
import transformers
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
S, B, H = 256, 2, 1024
SBH = S * B * H
VOCAB = 256
ADAPTERS = "fp32" if "--fp32-adapters" in sys.argv else "bf16"  # selector/sizing/activations.py LORA


from saved_tensors import REC, breakdown, emu4bit_forward, pack, unpack  # noqa: E402


def build(L, ffn, kv, attn, mode, lora_targets=None, lora_dropout=0.0, emu4bit=False):
    cfg = LlamaConfig(
        hidden_size=H,
        intermediate_size=ffn,
        num_attention_heads=16,
        num_key_value_heads=kv,
        num_hidden_layers=L,
        vocab_size=VOCAB,
        max_position_embeddings=S,
        attention_dropout=0.0,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config._attn_implementation = attn
    model.train()
    if mode == "full":
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        for p in model.parameters():
            p.requires_grad_(False)
        if emu4bit:
            for name, m in model.named_modules():
                if isinstance(m, nn.Linear) and "lm_head" not in name:
                    m.forward = emu4bit_forward.__get__(m, nn.Linear)
        if lora_targets and L > 0:
            lc = LoraConfig(
                r=16,
                lora_alpha=32,
                lora_dropout=lora_dropout,
                target_modules=lora_targets,
                bias="none",
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, lc)
            model.train()
            if ADAPTERS == "bf16":  # LoRA weights in bf16 too; fp32: PEFT's default (autocast_adapter_dtype)
                model = model.to(torch.bfloat16)
        if mode == "inputgrad":
            model.get_input_embeddings().register_forward_hook(lambda m, i, o: o.requires_grad_(True))
    return model


def attach_module_tracking(model):
    hs = []
    for name, m in model.named_modules():
        short = name
        for pre in ("base_model.model.", "model."):
            if short.startswith(pre):
                short = short[len(pre) :]
        # normalise layer index away
        parts = short.split(".")
        if len(parts) > 1 and parts[0] == "layers":
            parts[1] = "*"
        short = ".".join(parts)
        hs.append(m.register_forward_pre_hook(lambda m, a, _n=short: REC.modstack.append(_n)))
        hs.append(m.register_forward_hook(lambda m, a, o: (REC.modstack.pop(), None)[1]))
    return hs


def measure(L, **kw):
    torch.manual_seed(0)
    model = build(L, **kw)
    REC.watch(model)
    attach_module_tracking(model)
    ids = torch.randint(0, VOCAB, (B, S))
    REC.reset()
    REC.modstack = []
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = model(input_ids=ids, labels=ids)
    assert out.loss.requires_grad or L == 0
    # sanity: backward runs (only for L=1 to save CPU time)
    if L == 1 and out.loss.requires_grad:
        out.loss.backward()
    seen = dict(REC.seen)
    REC.reset()
    return seen


def per_layer(**kw):
    # L=0 baseline: for frozen-base configs use 'inputgrad' (final hidden requires grad, as it does once any
    # layer has a LoRA adapter), otherwise the loss path saves nothing and the baseline would be wrong.
    kw0 = (
        dict(kw)
        if kw.get("mode") == "full"
        else dict(ffn=kw["ffn"], kv=kw["kv"], attn=kw["attn"], mode="inputgrad")
    )
    s0 = measure(0, **kw0)
    s1, s2, s3 = (measure(L, **kw) for L in (1, 2, 3))

    def tot(s):
        return sum(v[0] for v in s.values())

    steady = (tot(s3) - tot(s2)) / SBH
    first = (tot(s1) - tot(s0)) / SBH

    # breakdown of steady layer: group entries of s3 minus s2 by module, via counting in layers.*
    def by_mod(s):
        d = collections.Counter()
        for nb, mod, shp, dt, _numel in s.values():
            d[(mod, shp, dt)] += nb
        return d

    b3, b2 = by_mod(s3), by_mod(s2)
    diff = {k: (b3[k] - b2.get(k, 0)) / SBH for k in b3 if b3[k] - b2.get(k, 0) != 0}
    return steady, first, diff, tot(s0) / SBH


CONFIGS = {
    "1 full FT": dict(mode="full"),
    "2 LoRA qv r16 do0": dict(mode="frozen", lora_targets=["q_proj", "v_proj"], lora_dropout=0.0),
    "3 LoRA qv r16 do.05": dict(mode="frozen", lora_targets=["q_proj", "v_proj"], lora_dropout=0.05),
    "4a LoRA all-lin do.05": dict(
        mode="frozen",
        lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lora_dropout=0.05,
    ),
    "4b LoRA all-lin do0": dict(
        mode="frozen",
        lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lora_dropout=0.0,
    ),
    "5 frozen, input grad only": dict(mode="inputgrad"),
    "6 emu-4bit + LoRA qv do0": dict(
        mode="frozen", lora_targets=["q_proj", "v_proj"], lora_dropout=0.0, emu4bit=True
    ),
    "6b emu-4bit + LoRA qv do.05": dict(
        mode="frozen", lora_targets=["q_proj", "v_proj"], lora_dropout=0.05, emu4bit=True
    ),
    "6c emu-4bit + LoRA all-lin do.05": dict(
        mode="frozen",
        lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lora_dropout=0.05,
        emu4bit=True,
    ),
}

if __name__ == "__main__":
    print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)
    results = []
    variants = [
        (3584, 4, "sdpa"),
        (3584, 16, "sdpa"),
        (2752, 4, "sdpa"),
        (2752, 16, "sdpa"),
        (3584, 4, "eager"),
        (2752, 16, "eager"),
    ]
    only = [a for a in sys.argv[1:] if not a.startswith("--")]  # optional filter on config prefix
    if only and only[0] != "1":
        variants = variants[:5]  # skip the second eager variant to save CPU time
    for cname, kw in CONFIGS.items():
        if only and not any(cname.startswith(o) for o in only):
            continue
        for ffn, kv, attn in variants:
            steady, first, diff, base = per_layer(ffn=ffn, kv=kv, attn=attn, **kw)
            print(
                f"{cname:34s} ffn={ffn} kv={kv:2d} {attn:5s}  steady={steady:7.3f}  first={first:7.3f}  "
                f"base(L=0)={base:.3f}",
                flush=True,
            )
            results.append(
                dict(
                    config=cname,
                    ffn=ffn,
                    kv=kv,
                    attn=attn,
                    steady=steady,
                    first=first,
                    base=base,
                    breakdown=breakdown(diff),
                )
            )
    out = "saved_acts_results%s.json" % ("_" + "_".join(only) if only else "")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
