"""What the sizing arithmetic knows about a model: ``ModelArch``, and a preset's measured
``WorkItem``. The presets (``selector.presets``) and the config.json reader
(``selector.hf_config``) both build one; neither needs the other to say what one is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ModelKind = Literal["transformer", "diffusion", "audio", "custom"]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A preset's measured cost of one item of batch work (an image, a second of audio):
    ``seconds`` of wall time for one item on one ``gpu`` computing in ``precision``, as
    ``source`` measured it in ``setting``. Other GPUs scale by tensor throughput."""

    unit: str
    seconds: float
    gpu: str
    precision: str
    setting: str
    source: str
    memory_mb: float | None = None  # the whole pipeline's peak GPU memory in that run, where reported
    steps: int | None = None  # denoising steps of that run (diffusion), where the source states them
    item_memory_mb: float | None = None  # GPU memory each further item of a batch adds (diffusion)
    item_memory_source: str = ""  # the sources key of that figure
    compile_speedup: float | None = None  # torch.compile's measured gain on this pipeline (diffusion)
    compile_source: str = ""  # where that gain was measured (eager and compiled by the same script)
    compile_held_out: str = ""  # the preset's own gain where it is held out as a calibration check
    denoiser: str = ""  # "unet" or "transformer" (diffusion): which measured terms carry over
    denoiser_source: str = ""  # the sources key that says so


@dataclass(frozen=True, slots=True)
class ModelArch:
    """What the arithmetic needs to know about a model.

    ``params_active`` differs from ``params`` for mixture-of-experts models (the parameters a
    token passes through). ``custom`` models carry their memory and bandwidth needs directly.
    """

    name: str
    kind: ModelKind
    params: float
    params_active: float
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    vocab: int = 0
    embedding_params: float = 0.0  # token embeddings + an untied output head (one matrix if tied); 0: unknown
    context: int = 0
    experts: int = 1
    experts_active: int = 1
    vram_gib: float | None = None
    min_bandwidth_gbps: float | None = None
    source: str = "spec"
    hf: str | None = None  # the Hugging Face repo a model server pulls
    hf_commit: str = ""  # sized from the Hub: the commit of ``hf`` read (served at it; "" otherwise)
    kv_lora_rank: int = 0  # multi-head latent attention (DeepSeek-V2/V3): the compressed KV width
    qk_rope_head_dim: int = 0  # MLA: the decoupled RoPE key width cached beside the latent
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: none)
    window_layers: int = 0  # how many layers use the sliding window (the rest attend globally)
    vision_params: float = 0.0  # multimodal: the vision encoder and projector (inside ``params``)
    image_tokens: int = 0  # multimodal: context tokens one image adds (0: not known from the config)
    image_token_layers: int = 0  # layers whose KV cache holds image tokens (0: all; mllama: cross-attention)
    encoder_layers: int = 0  # encoder-decoder (Whisper): encoder layers; ``layers`` are the decoder's
    encoder_positions: int = 0  # encoder-decoder: encoder states the decoder cross-attends to
    item: WorkItem | None = None  # diffusion and audio presets: the measured cost of one item
    checkpoint_bytes: float = 0.0  # bytes of the published weights files, when their dtypes are known
    family: str = ""  # config.json model_type (the outer one of a multimodal config): engine support
    rope_theta: float = 0.0  # RoPE base, repeated in a RoPE-scaling override
    linear_layers: int = 0  # hybrid models (Qwen3-Next): linear-attention layers, a fixed state, no KV cache
    linear_key_heads: int = 0  # Gated DeltaNet: key (and query) heads
    linear_value_heads: int = 0  # Gated DeltaNet: value heads
    linear_key_dim: int = 0  # Gated DeltaNet: key head width
    linear_value_dim: int = 0  # Gated DeltaNet: value head width
    linear_conv_kernel: int = 0  # Gated DeltaNet: the short convolution's width
    index_head_dim: int = 0  # DeepSeek-V3.2 sparse attention: the indexer's cached key width per layer
    kv_shared_layers: int = 0  # Gemma 3n: last layers that reuse an earlier layer's KV cache
    per_layer_embedding_params: float = 0.0  # Gemma 3n: per-layer embedding tables (inside ``params``)
    quantized_format: str = ""  # weights published quantised: "mxfp4" (gpt-oss experts), "fp8" (block)
    quantized_params: float = 0.0  # parameters stored in ``quantized_format`` (the rest in 16 bit)
    integer_method: str = ""  # weights published as integers: "awq", "gptq", "compressed-tensors"
    integer_precision: str = ""  # their precision, "int4" or "int8": the engine serves them as published
    attention_softcap: bool = False  # attention logits soft-capped (Gemma 2): training runs it eagerly
    post_norms: bool = False  # Gemma 2/3's norms: also after attention and the MLP, fp32 normalised values
    qk_norm: bool = False  # a norm on each head's queries and keys (Qwen 3, Gemma 3, OLMo 2)
    fp32_norms: bool = False  # norms multiply their weight in fp32 (Gemma 2/3, OLMo 2, Qwen3-Next)

    @property
    def is_multimodal(self) -> bool:
        return self.vision_params > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_split_heads(self) -> int:
        """Ways tensor parallelism can split the KV cache: by KV heads, but not MLA's latent,
        which every head shares and every tensor-parallel rank holds whole."""
        return 1 if self.is_mla else self.kv_heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache of their own: not a hybrid model's linear-attention layers
        (they keep a fixed state), not Gemma 3n's layers that reuse an earlier layer's cache."""
        return self.layers - self.linear_layers - self.kv_shared_layers

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: kv_heads × head_dim."""
        return self.kv_heads * self.head_dim
