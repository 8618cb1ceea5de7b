# Bytes a litgpt (0.4.13 == commit 0fb5847; model.py/lora.py identical to 00af8b0) transformer Block keeps
# for backward, per s*b*h, measured with PyTorch autograd on CPU: the source of
# selector/sizing/activations.py LITGPT_*. Run in a throwaway venv, never the project's:
#   python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch
#   /tmp/tv/bin/pip install --no-deps litgpt==0.4.13
# Measured 2026-12-05 with torch 2.13.0+cpu, litgpt 0.4.13. Same method as
# scripts/measure_saved_activations.py:
#   torch.autograd.graph.saved_tensors_hooks pack hook records each saved tensor's untyped storage;
#   each storage counted once; parameter and buffer storages excluded (rope cos/sin are GPT buffers);
#   per-layer cost = S(L=3) - S(L=2).
# Model code: litgpt.model.GPT/Block (full FT) and litgpt.lora.GPT/Block/LoRAQKVLinear/LoRALinear (LoRA),
# "bf16-true": whole model .to(bfloat16) (what Fabric's HalfPrecision.convert_module does), then
# model.max_seq_length = S (what litgpt/finetune/lora.py fit() does; recomputes cos/sin in fp32).
# Dropout active (model.train()), no activation checkpointing, SDPA is_causal (litgpt's path, mask=None).
# Frozen base: litgpt.lora.mark_only_lora_as_trainable.
# CPU vs CUDA: on CPU a dropout keeps a noise tensor in the input dtype (bf16: 2 B/elem); on CUDA
# native_dropout keeps a bool mask (1 B/elem). "cuda" numbers replace each saved tensor recorded inside a
# *lora_dropout module by numel * 1 byte.
#   /tmp/tv/bin/python measure_litgpt_saved.py [config-prefix ...]
import collections
import importlib.util
import json
import os
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- import litgpt.model / litgpt.lora / litgpt.config without litgpt/__init__ (which pulls lightning) ----
_spec = importlib.util.find_spec("litgpt")
_pkgdir = _spec.submodule_search_locations[0]
_pkg = types.ModuleType("litgpt")
_pkg.__path__ = [_pkgdir]
sys.modules["litgpt"] = _pkg
_utils = types.ModuleType("litgpt.utils")  # only these two helpers are used by config.py / lora.py


def find_multiple(n: int, k: int) -> int:  # litgpt.utils' helper: n rounded up to a multiple of k
    return -(-n // k) * k


def map_old_state_dict_weights(state_dict, mapping, prefix):  # litgpt.utils' helper: renames old keys
    for old, new in mapping.items():
        if prefix + old in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)
    return state_dict


_utils.find_multiple = find_multiple
_utils.map_old_state_dict_weights = map_old_state_dict_weights
sys.modules["litgpt.utils"] = _utils
_pkg.utils = _utils
import litgpt.config  # noqa: E402
import litgpt.lora  # noqa: E402
import litgpt.model  # noqa: E402

S, B, H = 256, 2, 1024
SBH = S * B * H
VOCAB = 256
N_HEAD, HEAD_SIZE = 16, 64


from saved_tensors import REC, breakdown, emu4bit_forward, pack, unpack  # noqa: E402

BASE = dict(
    name="llama-like",
    block_size=4096,
    vocab_size=VOCAB,
    padded_vocab_size=VOCAB,
    n_head=N_HEAD,
    head_size=HEAD_SIZE,
    n_embd=H,
    rotary_percentage=1.0,
    parallel_residual=False,
    bias=False,
    norm_class_name="RMSNorm",
    norm_eps=1e-5,
    mlp_class_name="LLaMAMLP",
)


def build(L, ffn, kv, mode, lora=None, emu4bit=False):
    if mode == "full":
        cfg = litgpt.config.Config(n_layer=L, intermediate_size=ffn, n_query_groups=kv, **BASE)
        model = litgpt.model.GPT(cfg)
    else:
        cfg = litgpt.lora.Config(n_layer=L, intermediate_size=ffn, n_query_groups=kv, **BASE, **lora)
        model = litgpt.lora.GPT(cfg)
    model = model.to(torch.bfloat16)  # bf16-true
    model.max_seq_length = S  # as finetune/lora.py fit(): recomputes cos/sin (fp32 buffers)
    model.train()
    if mode == "full":
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        litgpt.lora.mark_only_lora_as_trainable(model)
        if emu4bit:  # what BitsandbytesPrecision converts: every nn.Linear (the LoRA wrappers' .linear)
            for m in model.modules():
                if type(m) is nn.Linear:
                    m.forward = emu4bit_forward.__get__(m, nn.Linear)
    return model


def attach_module_tracking(model):
    for name, m in model.named_modules():
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "transformer" and parts[1] == "h":
            parts = ["h", "*", *parts[3:]]
        short = ".".join(parts) or "<model>"
        m.register_forward_pre_hook(lambda m, a, _n=short: REC.modstack.append(_n))
        m.register_forward_hook(lambda m, a, o: (REC.modstack.pop(), None)[1])


def measure(L, **kw):
    torch.manual_seed(0)
    model = build(L, **kw)
    REC.watch(model)
    attach_module_tracking(model)
    idx = torch.randint(0, VOCAB, (B, S))
    REC.reset()
    REC.modstack = []
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        logits = model(idx)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
    assert loss.requires_grad
    if L == 1:
        loss.backward()  # sanity: backward runs
    seen = dict(REC.seen)
    REC.reset()
    return seen


def cuda_bytes(v):
    nb, mod, _shape, _dtype, numel = v
    return numel if "lora_dropout" in mod else nb  # CUDA: bool mask, 1 B/elem


def per_layer(**kw):
    s2, s3 = measure(2, **kw), measure(3, **kw)
    raw = (sum(v[0] for v in s3.values()) - sum(v[0] for v in s2.values())) / SBH
    cuda = (sum(cuda_bytes(v) for v in s3.values()) - sum(cuda_bytes(v) for v in s2.values())) / SBH

    def by_mod(s):
        d = collections.Counter()
        for v in s.values():
            d[(v[1], v[2], v[3])] += v[0]
        return d

    b3, b2 = by_mod(s3), by_mod(s2)
    diff = {k: (b3[k] - b2.get(k, 0)) / SBH for k in b3 if b3[k] - b2.get(k, 0) != 0}
    return raw, cuda, diff


def lora(r=8, do=0.05, q=True, k=False, v=True, proj=False, mlp=False):
    return dict(
        lora_r=r,
        lora_alpha=2 * r,
        lora_dropout=do,
        lora_query=q,
        lora_key=k,
        lora_value=v,
        lora_projection=proj,
        lora_mlp=mlp,
        lora_head=False,
    )


CONFIGS = {
    "A LoRA qv r8 do.05": dict(mode="frozen", lora=lora()),
    "B LoRA qv r8 do0": dict(mode="frozen", lora=lora(do=0.0)),
    "C LoRA all r8 do.05": dict(mode="frozen", lora=lora(k=True, proj=True, mlp=True)),
    "C0 LoRA all r8 do0": dict(mode="frozen", lora=lora(do=0.0, k=True, proj=True, mlp=True)),
    "D emu-4bit + LoRA qv r8 do.05": dict(mode="frozen", lora=lora(), emu4bit=True),
    "D0 emu-4bit + LoRA qv r8 do0": dict(mode="frozen", lora=lora(do=0.0), emu4bit=True),
    "E full FT": dict(mode="full"),
    "A32 LoRA qv r32 do.05": dict(mode="frozen", lora=lora(r=32)),
}
VARIANTS = [(3584, 4), (2752, 16), (3584, 16), (2752, 4), (3584, 8), (3584, 1), (2752, 8)]
# fits: "4cell" = the project's cells (ffn 3.5h/2.6875h x kv 4/16), as its lines were fitted;
# "gqa" = 1 < kv < heads only (kv 4 and 8): litgpt keeps the whole fused qkv output when kv == heads (MHA)
# or kv == 1 (MQA), because v is then a view of it; "MHA/MQA minus fit" gives that step
FITS = {"4cell": lambda ffn, kv: kv in (4, 16), "gqa": lambda ffn, kv: 1 < kv < N_HEAD}


def fit(rows, key):
    # least squares c + k*g + m*f over the measured shapes
    X = torch.tensor([[1.0, kv / N_HEAD, ffn / H] for ffn, kv, _, _ in rows], dtype=torch.float64)
    y = torch.tensor([[r[2] if key == "raw" else r[3]] for r in rows], dtype=torch.float64)
    sol = torch.linalg.lstsq(X, y).solution.flatten().tolist()
    resid = (X @ torch.tensor(sol, dtype=torch.float64).unsqueeze(1) - y).abs().max().item()
    return sol, resid


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    only = sys.argv[1:]
    print("torch", torch.__version__, "litgpt", _pkgdir, flush=True)
    results = []
    for cname, kw in CONFIGS.items():
        if only and not any(cname.startswith(o) for o in only):
            continue
        rows = []
        for ffn, kv in VARIANTS:
            raw, cuda, diff = per_layer(ffn=ffn, kv=kv, **kw)
            rows.append((ffn, kv, raw, cuda))
            print(
                f"{cname:32s} ffn={ffn} kv={kv:2d}  raw(CPU)={raw:7.3f}  cuda-corrected={cuda:7.3f}",
                flush=True,
            )
            results.append(
                dict(
                    config=cname,
                    ffn=ffn,
                    kv=kv,
                    raw=raw,
                    cuda=cuda,
                    breakdown=breakdown(diff),
                )
            )
        for fname, sel in FITS.items():
            sub = [r for r in rows if sel(r[0], r[1])]
            for key in ("raw", "cuda"):
                (c, k, m), res = fit(sub, key)
                mha = [
                    (r[1], r[0], (r[2] if key == "raw" else r[3]) - (c + k * r[1] / N_HEAD + m * r[0] / H))
                    for r in rows
                    if not sel(r[0], r[1])
                ]
                print(
                    f"  FIT {fname:5s} {key:4s} (c, k, m) = ({c:.3f}, {k:.3f}, {m:.3f})  max|resid|={res:.3f}"
                    f"  other cells minus fit: {', '.join(f'kv{a}/ffn{b}:{x:+.3f}' for a, b, x in mha)}",
                    flush=True,
                )
                results.append(
                    dict(config=cname, fit=fname, kind=key, c=c, k=k, m=m, max_resid=res, mha_delta=mha)
                )
    out = "litgpt_saved_results%s.json" % ("_" + "_".join(o.replace(" ", "") for o in only) if only else "")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
