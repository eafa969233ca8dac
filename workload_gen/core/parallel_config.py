"""Parallel layout and training settings (Megatron-LM semantics).

Only data: DP and gradient accumulation are derived properties, never stored twice.
Checks that involve only these fields run at construction; checks against the model
(heads, layers, experts) are in :func:`check_against_model`.
"""
from __future__ import annotations

import math

from dataclasses import fields
from operator import attrgetter
from typing import Literal

from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import MAX_MICROBATCHES, PARALLEL_FIELD_LIMITS, check_fields, check_limit
from workload_gen.core.model_config import ModelConfig, fields_dict
from workload_gen.core.record import record

Dtype = Literal["bf16", "fp16", "fp32", "fp8", "fp4"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "fp4": 1}
"""Bytes per element of each training dtype. fp8 and fp4 training keep bf16 weights and
activations (``param_bytes`` is 2); their entry here is the whole-byte size the few
dtype-sized conversions use (an e2m1 element is half a byte: workload_gen.costs.FP4_BYTES)."""
QUANTIZED_DTYPES = ("fp8", "fp4")
"""Training dtypes whose linear-layer GEMMs Transformer Engine runs quantized, around bf16
weights and activations (Megatron --fp8-format / --fp4-format on top of --bf16)."""


def _divisors(n: int) -> str:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    shown = ", ".join(str(d) for d in ds[:12])
    return shown + (", ..." if len(ds) > 12 else "")


FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
PER_TENSOR_FP8 = ("delayed", "tensorwise")
"""The fp8 recipes with one scale per tensor (Transformer Engine's Float8Tensor): their data
serves the transposed use where FP8 GEMMs take any layout (GpuSpec.fp8_gemm_any_layout)."""
FP4_RECIPES = ("nvfp4", "custom")
"""Megatron's --fp4-recipe choices (TransformerConfig.fp4_recipe, the same at 2edffadb and
HEAD): nvfp4 is Transformer Engine's NVFP4BlockScaling; custom loads a user's quantizer
factory (--fp4-quantizer-factory), whose kernels are unknown and so refused."""
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron's --recompute-modules choices for transformer models (TransformerConfig; its
Mamba/GDN-only modules are left out)."""
RECIPE_BOOLS = ("moe_enable_deepep", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                "moe_shared_expert_overlap", "moe_pad_expert_input_to_capacity", "moe_router_force_load_balancing",
                "moe_permute_fusion", "moe_router_padding_for_quantization",
                "fp8_param_gather", "fp4_param_gather", "reuse_grad_buf_for_mxfp8_param_ag", "use_precision_aware_optimizer",
                "overlap_param_gather_with_optimizer_step", "use_megatron_fsdp", "tp_only_amax_red")
RECIPE_CHOICES: dict[str, tuple[str, ...]] = {
    "moe_token_dispatcher": ("alltoall", "allgather", "flex"),
    "moe_flex_dispatcher_backend": ("deepep", "hybridep", "ncclep"),
    "cuda_graph_impl": ("none", "local", "transformer_engine", "full_iteration"),
    "main_params_dtype": ("fp32", "fp16"), "main_grads_dtype": ("fp32", "bf16"),
    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"), "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8"),
}
"""Megatron's choices for the recipe options with a fixed set of values."""
OPTIMIZERS = ("adam", "distributed_fused_adam")
CP_COMMS = ("p2p", "all_gather", "a2a")
"""Megatron's --cp-comm-type choices (ParallelConfig.cp_comm)."""
RECOMPUTES = ("none", "selective", "full")
"""Megatron's --recompute-granularity, with none for off (ParallelConfig.recompute)."""
PIPELINE_SCHEDULES = ("1f1b", "interleaved", "dualpipev")
"""Valid ParallelConfig.pipeline_schedule values (engine.schedules registers each)."""
RECOMPUTE_METHODS = ("uniform", "block")
"""Megatron's --recompute-method choices."""


@record(kw_only=True)
class ParallelConfig:
    """How a model is split and trained: the parallel sizes, batch and sequence, precision,
    recomputation and the Megatron overlap flags; fields mirror Megatron's arguments."""
    # --- layout ---------------------------------------------------------------
    world_size: int = 8
    tp: int = 1
    """Tensor-parallel size (Megatron --tensor-model-parallel-size)."""
    sp: bool = False
    """Sequence parallelism (Korthikanti et al., arXiv 2205.05198); needs tp > 1."""
    pp: int = 1
    vpp: int = 1
    """Virtual pipeline chunks per stage (interleaved 1F1B); 1 means plain 1F1B."""
    cp: int = 1
    """Context-parallel size; sequence split over cp ranks."""
    cp_comm: Literal["p2p", "all_gather", "a2a"] = "p2p"
    """How CP exchanges K/V (Megatron --cp-comm-type): ring send/recv (p2p), one
    all-gather of K/V, or all-to-all of Q/K/V and the output between sequence and head
    sharding (a2a, DeepSpeed-Ulysses style)."""
    ep: int = 1
    """Expert-parallel size (Megatron --expert-model-parallel-size). Megatron-Core's MoE
    parallel folding: the expert layers lay out the same ranks with their own generator
    (expert-TP fastest, then EP, then expert-DP, then PP), so ep need not divide dp*cp;
    etp*ep*pp must divide world_size and ep the expert count."""
    etp: int | None = None
    """Expert tensor-parallel size (Megatron --expert-tensor-parallel-size); None means the
    same as tp. Expert data parallelism (edp) is world_size / (etp*ep*pp)."""
    # --- batch -----------------------------------------------------------------
    micro_batch: int = 1
    global_batch: int = 8
    seq_length: int = 2048
    dtype: Dtype = "bf16"
    fp8_recipe: Literal["delayed", "tensorwise", "mxfp8", "blockwise"] = "delayed"
    """Transformer Engine's FP8 scaling recipe when dtype is fp8 (Megatron --fp8-recipe):
    delayed (amax history, Hopper's default), tensorwise (current per-tensor scaling: one
    more pass over each tensor for its amax), mxfp8 (Blackwell's 1x32 block scales) or
    blockwise (DeepSeek-style 1x128/128x128 blocks). Sets the cast traffic of each FP8
    GEMM input (workload_gen.costs.FP8_CAST_BYTES)."""
    fp4_recipe: Literal["nvfp4", "custom"] = "nvfp4"
    """Transformer Engine's FP4 recipe when dtype is fp4 (Megatron --fp4-recipe, default
    nvfp4; --fp4-format e2m1 sets dtype fp4): NVFP4BlockScaling, e2m1 values in 1x16 blocks
    with an E4M3 scale each and one FP32 scale per tensor, 16x16 blocks for weights, a random
    Hadamard transform on the wgrad inputs and stochastic rounding of gradients (TE docs,
    features/low_precision_training/nvfp4; arXiv 2509.25149). Only the linear layers' GEMMs
    run in FP4; attention, the embedding and the output layer stay bf16."""
    fp4_param_gather: bool = False
    """Keep the transformer layers' linear weights as NVFP4 tensors and all-gather them in
    NVFP4 (Megatron --fp4-param-gather, TransformerConfig.fp4_param): modelled in
    engine.memory (no bf16 copy) and the distributed optimizer's all-gather (0.5 B per
    element); needs dtype fp4 (Megatron's assert)."""
    first_last_layers_bf16: bool = False
    """Run the first num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16
    transformer layers (global layer numbers) in bf16 under fp8 or fp4 training (Megatron
    --first-last-layers-bf16; fp8_utils/fp4_utils get_*_context): their GEMMs are bf16 and
    cast nothing. The NVFP4 paper (arXiv 2509.25149) keeps some first and last blocks in bf16
for stability; Megatron-Bridge's nemotron_3_super_bf16_with_nvfp4_mixed keeps the last 14."""
    num_layers_at_start_in_bf16: int = 1
    """Megatron --num-layers-at-start-in-bf16 (default 1); used only with first_last_layers_bf16."""
    num_layers_at_end_in_bf16: int = 1
    """Megatron --num-layers-at-end-in-bf16 (default 1); used only with first_last_layers_bf16."""
    attention_backend: Literal["flash", "unfused"] = "flash"
    """flash: a fused kernel that never writes the s x s scores (Megatron --attention-backend
    flash, fused or auto; FlashAttention, cuDNN); unfused: scores and probabilities go
    through memory (--attention-backend unfused or local; Megatron-LM before 2022)."""
    # --- memory savers ---------------------------------------------------------
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_method: Literal["uniform", "block"] = "uniform"
    recompute_num_layers: int | None = None
    """Layers recomputed per stage with full recompute (block); None means all."""
    distributed_optimizer: bool = False
    """ZeRO-1: optimizer states and the fp32 master weights sharded over dp*cp."""
    optimizer: Literal["adam", "distributed_fused_adam"] = "adam"
    """adam: Megatron-LM's Adam (fp32 master + m + v, 12 bytes/param, sharded with
    distributed_optimizer); distributed_fused_adam: NeMo's Apex DistributedFusedAdam, a
    ZeRO optimizer (needs distributed_optimizer) that with bf16 weights keeps only the 16
    low bits of the fp32 master (10 bytes/param) and a full-size contiguous grad buffer
    (engine.memory gives the sources). Megatron/NeMo --optimizer, NeMo optim.name."""
    clip_grad: float = 1.0
    """Gradient clipping by global norm (Megatron --clip-grad, default 1.0). Megatron's optimizer
    computes the gradient norm only when it is > 0 (MegatronOptimizer.step: ``if
    self.config.clip_grad > 0.0: grad_norm = self.clip_grad_norm(...)``), so 0 drops the step's
    pass over the main gradients (the builder's ``grad_norm`` op); any positive value costs the same."""
    # --- overlap switches ---------------------------------------------------------
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    overlap_p2p_comm: bool = True
    """Overlap pipeline send/recv with compute in the interleaved schedule (Megatron's
    default; --no-overlap-p2p-communication turns it off). No effect with vpp = 1."""
    ddp_bucket_size: int | None = None
    """Gradient bucket size in elements; None means Megatron's max(40M, 1M * dp)."""
    grad_reduce_in_fp32: bool | None = None
    """Accumulate and reduce gradients in fp32 (Megatron --accumulate-allreduce-grads-in-fp32).
    None means Megatron's default: on for bf16 (its arguments.py forces it), off otherwise."""
    gradient_accumulation_fusion: bool = True
    """Linear layers' wgrad GEMMs accumulate into the main gradient in place (Megatron's
    default; --no-gradient-accumulation-fusion turns it off). Off, each writes a fresh
    gradient in the parameter dtype that DDP's backward hook then adds to the main gradient,
    one eager add per weight tensor (workload_gen.costs.grad_accumulate)."""
    rope_fusion: bool = True
    """Transformer Engine's fused RoPE kernel (Megatron's default, ``apply_rope_fusion``;
    --no-rope-fusion turns it off). Off, standard attention's RoPE runs Megatron-Core's eager
    path (workload_gen.costs.rope_unfused), as it does anyway when YaRN's cos/sin scale is not 1
    (ModelConfig.rope_cos_sin_scale). MLA's RoPE is costed as its fused kernel either way."""
    make_vocab_size_divisible_by: int = 128
    """Megatron pads the vocabulary to a multiple of this times tp."""
    first_stage_layers: int | None = None
    """Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers);
    None means an even share. The other stages split the rest evenly."""
    last_stage_layers: int | None = None
    """Layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)."""
    account_for_embedding_in_pipeline_split: bool = False
    """The embedding takes one layer slot of the first virtual stage (Megatron
    --account-for-embedding-in-pipeline-split): the layers plus this slot split evenly over
    the pp*vpp virtual stages, and the first holds one layer fewer. NVIDIA's Llama 3.1 405B,
    DeepSeek-V3 and Qwen3-235B recipes set it."""
    account_for_loss_in_pipeline_split: bool = False
    """The output layer and loss take one layer slot of the last virtual stage (Megatron
    --account-for-loss-in-pipeline-split)."""
    pipeline_layout: str | None = None
    """Megatron-Core's --pipeline-model-parallel-layout: the layers of every virtual stage,
    in data-flow order, e.g. 'Et*3|(tt|)*29,m|L' (E embedding, t transformer layer, m MTP
    layer, L loss; '|' ends a virtual stage; (...)*N and x*N repeat; commas are cosmetic).
    Virtual stage v runs on pipeline rank v % pp as chunk v // pp, so its stage count must
    be pp*vpp (the loader derives vpp from it). None means the even split (or the
    first/last-stage counts). Unit: a string of layer symbols
    (workload_gen/core/pipeline_layout.py)."""
    pipeline_schedule: str | None = None
    """The pipeline schedule: None for Megatron's (1f1b, or interleaved with vpp > 1), or
    "dualpipev": DeepSeek's DualPipeV (deepseek-ai/DualPipe dualpipe/dualpipev.py), the V-shape
    cut of DualPipe. It needs vpp = 2 (each rank holds virtual stages s and 2*pp-1-s, so rank 0
    holds the embedding and the loss; workload_gen.core.virtual_stages) and at least 2*pp
    micro-batches (DualPipeV asserts it); its steady state runs each forward beside another
    micro-batch's backward as one overlapped pass (engine.schedules.dualpipev)."""
    defer_embedding_wgrad_compute: bool = False
    """Megatron --defer-embedding-wgrad-compute: the output layer's weight-gradient GEMM
    (and the sequence-parallel gather of its input) of the first ``wgrad_deferral_limit``
    micro-batches is not run in their backward but after the last one, before the
    gradients are finalised, on the last pipeline stage; meanwhile their input and output
    gradient stay in memory. Needs pp > 1. NVIDIA's NeMo Llama 70B/405B recipes set it."""
    wgrad_deferral_limit: int = 0
    """Micro-batches whose output-layer wgrad is deferred (Megatron --wgrad-deferral-limit);
    0 means all of them."""
    # --- MoE and recipe options (Megatron flags) ---
    # Spellings, types and defaults from Megatron-LM (arguments.py, TransformerConfig) at
    # d98e8a64. Options whose mechanism is not modelled yet take their no-op value only:
    # any other is refused by workload_gen.core.unmodelled (one table for YAML and flags).
    moe_token_dispatcher: Literal["alltoall", "allgather", "flex"] = "alltoall"
    """MoE token dispatcher (Megatron --moe-token-dispatcher-type). The workload models
    alltoall (permute, all-to-all over EP, grouped GEMMs, all-to-all back); allgather and
    flex are refused until modelled. Megatron's own default is allgather: a launch line
    that omits the flag is read as alltoall here."""
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep", "ncclep"] = "deepep"
    """Backend of the flex dispatcher (Megatron --moe-flex-dispatcher-backend); used only
    with moe_token_dispatcher flex, so with alltoall it changes nothing."""
    moe_enable_deepep: bool = False
    """Megatron --moe-enable-deepep (deprecated: the flex dispatcher with the deepep backend,
    which it selects)."""
    moe_hybridep_num_sms: int | None = None
    """SMs the flex dispatcher's kernels hold (Megatron --moe-hybridep-num-sms); None means
    DeepEP's default, 20. Compute running beside them gets the other SMs (engine.moe_traffic)."""
    overlap_moe_expert_parallel_comm: bool = False
    """Overlap the EP all-to-all with another micro-batch's compute in the 1F1B phase
    (Megatron --overlap-moe-expert-parallel-comm): steady-state forward/backward pairs run as
    one combined pass (engine.a2a_overlap). Megatron requires EP > 1, the alltoall or flex
    dispatcher, virtual pipeline stages when PP > 1 and no full recompute."""
    delay_wgrad_compute: bool = False
    """Delay weight-gradient GEMMs so that the backward dispatch hides under them (Megatron
    --delay-wgrad-compute; needs the EP all-to-all overlap, as in Megatron)."""
    moe_shared_expert_overlap: bool = False
    """Run the shared experts on a side stream under the token dispatch (Megatron
    --moe-shared-expert-overlap)."""
    moe_expert_capacity_factor: float | None = None
    """Expert capacity factor (Megatron --moe-expert-capacity-factor); None means dropless.
    Each expert takes at most capacity = ceil(tokens*topk/experts * factor) of a rank's
    token copies (Megatron's get_capacity); under the workload's uniform routing a factor
    >= 1 drops nothing, and below 1 each expert keeps the capacity."""
    moe_pad_expert_input_to_capacity: bool = False
    """Pad every expert's input to the capacity (Megatron
    --moe-pad-expert-input-to-capacity): each rank sends experts*capacity token copies, the
    all-to-alls and expert GEMMs grow to match. Needs moe_expert_capacity_factor."""
    moe_router_num_groups: int | None = None
    """Expert groups for group-limited routing (Megatron --moe-router-num-groups). Refused
    when set: not modelled yet."""
    moe_router_group_topk: int | None = None
    """Groups each token may route to (Megatron --moe-router-group-topk). Refused when set."""
    moe_permute_fusion: bool = False
    """TE's fused token permute/unpermute kernels (Megatron --moe-permute-fusion; off by default
    in Megatron, as here): off, they run as torch ops (workload_gen.costs.permute_unfused)."""
    moe_router_padding_for_quantization: bool = False
    """Pad each expert's tokens to the fp8/fp4 GEMM alignment in the router's map (Megatron
    --moe-router-padding-for-quantization, old spelling --moe-router-padding-for-fp8): the
    padding slots travel as rows, and the experts skip their own padding copy
    (workload_gen.core.moe_padding). Needs fp8 or fp4 and a dispatcher other than allgather."""
    moe_router_force_load_balancing: bool = False
    """Route with random logits, so the experts are evenly loaded (Megatron
    --moe-router-force-load-balancing, a benchmarking switch). The workload already routes
    every token copy uniformly over the experts on average; the switch sets how unevenly the
    copies land on the EP ranks (workload_gen.core.moe_routing: the statistics of uniform
    top-k, no free parameter) for the busiest rank's memory."""
    moe_load_imbalance: float | None = None
    """Max/mean of the token copies an EP rank receives under learned routing (a trainsim
    option: Megatron has no flag, the imbalance is an outcome of its router). None means the
    prior of workload_gen.core.moe_routing (1.23, GLM-5's measured 18.6% of MoE-layer time
    lost at EP 8). Unit: ratio >= 1. Not used with moe_router_force_load_balancing."""
    recompute_modules: tuple[str, ...] = ("core_attn",)
    """Modules selective recompute re-runs (Megatron --recompute-modules; default
    core_attn), each as Megatron checkpoints it: core_attn (core attention), mla_up_proj
    (MLA's q/k/v re-made by the up projections and RoPE), moe_act (the expert activation;
    fc2's input not kept), mlp (dense layers' MLP), shared_experts, moe (the whole MoE
    layer, all-to-alls included) and layernorm (the norms that are modules of their own:
    MLA's input norm, MoE layers' pre-MLP norm). Refused: moe with moe_act, shared_experts
    or layernorm (nested checkpoints), and moe_act or layernorm under fp8. Used only with
    recompute selective: with none or full it changes nothing, as in Megatron (so a sweep
    or search may vary recompute around it)."""
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = "none"
    """CUDA graph capture (Megatron --cuda-graph-impl; --enable-cuda-graph is local,
    --external-cuda-graph transformer_engine): the captured modules' kernels cost the host one
    graph replay instead of a launch each (engine.host_launch)."""
    cuda_graph_scope: tuple[str, ...] = ()
    """Modules captured in CUDA graphs (Megatron --cuda-graph-scope, now --cuda-graph-modules):
    attn, mlp, moe, moe_router, moe_preprocess; empty means the whole layer (a dropless MoE
    layer's dispatch stays eager: it waits for the host). Modelled in engine.host_launch."""
    fp8_param_gather: bool = False
    """Keep the transformer layers' linear weights as fp8 tensors and all-gather them from
    their own buffers (Megatron --fp8-param-gather): modelled in workload_gen.builder and
    engine.memory; the combinations that are not are refused (core.unmodelled)."""
    reuse_grad_buf_for_mxfp8_param_ag: bool = False
    """Use the gradient buffer for the MXFP8 parameter all-gather (Megatron
    --reuse-grad-buf-for-mxfp8-param-ag). It acts only on fp8 weights, which exist only
    with fp8_param_gather: alone it changes nothing."""
    tp_only_amax_red: bool = False
    """FP8 delayed scaling all-reduces its amaxes over the tp*cp ranks only instead of the
    stage's tp*cp*dp (Megatron --tp-only-amax-red: ``get_amax_reduction_group`` returns the
    tensor-and-context-parallel group); the ``amax`` group follows it (core.placement)."""
    use_precision_aware_optimizer: bool = False
    """Transformer Engine's FusedAdam with the dtypes below (Megatron
    --use-precision-aware-optimizer; needs distributed_optimizer and adam). With bf16 weights
    it keeps only the 16 low bits of the fp32 master: state and step bytes in
    workload_gen.core.optimizer_state."""
    main_params_dtype: Literal["fp32", "fp16"] = "fp32"
    """Main (master) weight dtype of the precision-aware optimizer (Megatron
    --main-params-dtype). fp16 is refused (its scaled path is not modelled)."""
    main_grads_dtype: Literal["fp32", "bf16"] = "fp32"
    """Main-gradient dtype of the precision-aware optimizer (Megatron --main-grads-dtype):
    bf16 turns fp32 gradient accumulation off, so the grad buffer and the DP reduction are
    bf16 (grad_bytes 2)."""
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = "fp32"
    """Adam first-moment dtype (Megatron --exp-avg-dtype): fp32, or bf16 with exp_avg_sq_dtype
    bf16; the others are refused (TE's unscale/rescale passes are not modelled)."""
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = "fp32"
    """Adam second-moment dtype (Megatron --exp-avg-sq-dtype): as exp_avg_dtype."""
    overlap_param_gather_with_optimizer_step: bool = False
    """Overlap the first bucket's parameter all-gather with the optimizer step (Megatron
    --overlap-param-gather-with-optimizer-step; engine.program moves that gather beside the
    optimizer step). Megatron requires the distributed optimizer, --overlap-param-gather and
    the interleaved schedule."""
    use_megatron_fsdp: bool = False
    """Megatron FSDP instead of the distributed optimizer (Megatron --use-megatron-fsdp,
    formerly --use-custom-fsdp). Refused: not modelled yet."""

    def __post_init__(self) -> None:
        for name in ("world_size", "tp", "pp", "vpp", "cp", "ep", "micro_batch", "global_batch", "seq_length"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(name, v, "must be a positive integer")
        if not isinstance(self.make_vocab_size_divisible_by, int) or self.make_vocab_size_divisible_by < 1:
            raise ConfigError("make_vocab_size_divisible_by", self.make_vocab_size_divisible_by, "must be a positive integer")
        if self.ddp_bucket_size is not None and (not isinstance(self.ddp_bucket_size, int) or self.ddp_bucket_size < 1):
            raise ConfigError("ddp_bucket_size", self.ddp_bucket_size, "must be a positive integer (elements)")
        if self.recompute_num_layers is not None and (
                not isinstance(self.recompute_num_layers, int) or self.recompute_num_layers < 1):
            raise ConfigError("recompute_num_layers", self.recompute_num_layers, "must be a positive integer")
        for name in ("first_stage_layers", "last_stage_layers"):
            v = getattr(self, name)
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(name, v, "must be a positive integer")
            if self.pp == 1:
                raise ConfigError(name, v, "uneven pipeline stages need pp > 1")
            if v % self.vpp:
                # Megatron-Core (TransformerConfig): each virtual stage of the rank holds v / vpp
                raise ConfigError(name, v, f"must be divisible by vpp={self.vpp} (each of the stage's "
                                           "virtual stages holds an equal share)")
        if not isinstance(self.wgrad_deferral_limit, int) or isinstance(self.wgrad_deferral_limit, bool) \
                or self.wgrad_deferral_limit < 0:
            raise ConfigError("wgrad_deferral_limit", self.wgrad_deferral_limit,
                              "must be an integer >= 0 (0 defers every micro-batch)")
        for name in ("defer_embedding_wgrad_compute", "gradient_accumulation_fusion"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        if self.defer_embedding_wgrad_compute and self.pp == 1:
            raise ConfigError("defer_embedding_wgrad_compute", True,
                              "needs pp > 1 (Megatron defers into the pipeline flush)")
        for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ConfigError(name, v, "must be true or false")
            if v and (self.first_stage_layers is not None or self.last_stage_layers is not None):
                # Megatron-Core asserts the same (transformer_block.get_num_layers_to_build)
                raise ConfigError(name, v, "cannot be combined with first_stage_layers/last_stage_layers")
        if self.etp is not None and (not isinstance(self.etp, int) or self.etp < 1):
            raise ConfigError("etp", self.etp, "must be a positive integer")
        if self.pipeline_layout is not None:
            self._check_pipeline_layout()
        check_fields(self, PARALLEL_FIELD_LIMITS)  # 10^7 ranks ran for 16 s and 100+ GB of plans
        for name in ("global_batch", "micro_batch", "seq_length"):
            check_limit(name, getattr(self, name), "MAX_DIM", "elements")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError("dtype", self.dtype, f"valid: {', '.join(DTYPE_BYTES)}")
        if self.recompute not in RECOMPUTES:
            raise ConfigError("recompute", self.recompute, f"valid: {', '.join(RECOMPUTES)}")
        if self.recompute_method not in RECOMPUTE_METHODS:
            raise ConfigError("recompute_method", self.recompute_method, f"valid: {', '.join(RECOMPUTE_METHODS)}")
        if self.fp8_recipe not in FP8_RECIPES:
            raise ConfigError("fp8_recipe", self.fp8_recipe, f"valid: {', '.join(FP8_RECIPES)}")
        self._check_fp4()
        if self.attention_backend not in ("flash", "unfused"):
            raise ConfigError("attention_backend", self.attention_backend, "valid: flash, unfused")
        clip = self.clip_grad
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0:
            raise ConfigError("clip_grad", clip, "must be a number >= 0 (0 turns gradient clipping off; "
                                                 "Megatron reads a negative one as off too)")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", self.optimizer, f"valid: {', '.join(OPTIMIZERS)}")
        if self.optimizer == "distributed_fused_adam" and not self.distributed_optimizer:
            raise ConfigError("optimizer", self.optimizer,
                              "shards the optimizer over data parallelism: needs distributed_optimizer "
                              "(--use-distributed-optimizer)")
        if self.cp_comm not in CP_COMMS:
            raise ConfigError("cp_comm", self.cp_comm, f"valid: {', '.join(CP_COMMS)}")
        if self.overlap_param_gather and not self.distributed_optimizer:
            raise ConfigError("overlap_param_gather", True, "needs the distributed optimizer (Megatron requires it)")
        if self.tp_comm_overlap and not self.sp:
            raise ConfigError("tp_comm_overlap", True, "needs sequence parallelism (Megatron overlaps TP comm only with sp)")
        if self.sp and self.tp == 1:
            raise ConfigError("sp", True, "sequence parallelism needs tp > 1")
        model_ranks = self.tp * self.pp * self.cp
        if self.world_size % model_ranks:
            raise ConfigError(
                "world_size", self.world_size,
                f"must be a multiple of tp*pp*cp = {self.tp}*{self.pp}*{self.cp} = {model_ranks}",
            )
        expert_ranks = self.expert_tp * self.ep * self.pp
        if self.world_size % expert_ranks:
            raise ConfigError(
                "etp", self.expert_tp,
                f"expert_tp*ep*pp = {expert_ranks} must divide world_size={self.world_size}",
            )
        per_step = self.micro_batch * self.dp
        if self.global_batch % per_step:
            raise ConfigError(
                "global_batch", self.global_batch,
                f"must be a multiple of micro_batch*dp = {self.micro_batch}*{self.dp} = {per_step}",
            )
        if self.num_microbatches > MAX_MICROBATCHES:
            raise ConfigError("global_batch", self.global_batch,
                              f"gives {self.num_microbatches:,} micro-batches (global_batch / (micro_batch*dp)), over "
                              f"the limit of {MAX_MICROBATCHES:,} (workload_gen/core/limits.py MAX_MICROBATCHES)")
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError("vpp", self.vpp, "interleaving needs pp > 1")
        if self.pipeline_schedule is not None:
            self._check_schedule()
        if self.schedule == "interleaved" and self.num_microbatches % self.pp:
            raise ConfigError(
                "global_batch", self.global_batch,
                f"the interleaved schedule needs micro-batches ({self.num_microbatches}) divisible by pp={self.pp}",
            )
        if self.seq_length % self.cp:
            raise ConfigError("seq_length", self.seq_length, f"must be divisible by cp={self.cp}")
        if self.cp > 1 and self.seq_length % (2 * self.cp):
            raise ConfigError("seq_length", self.seq_length, f"must be divisible by 2*cp={2 * self.cp} (load-balanced CP)")
        if _RECIPE_VALUES(self) != _RECIPE_DEFAULTS:  # the common case costs one C-level tuple compare
            self._check_recipe_options()

    def _check_recipe_options(self) -> None:
        """Types and Megatron's own rules for the MoE and recipe options, then the refusal of
        any whose mechanism is not modelled yet (workload_gen.core.unmodelled)."""
        for name in RECIPE_BOOLS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        for name, valid in RECIPE_CHOICES.items():
            if getattr(self, name) not in valid:
                raise ConfigError(name, getattr(self, name), f"valid: {', '.join(valid)}")
        for name in ("moe_hybridep_num_sms", "moe_router_num_groups", "moe_router_group_topk"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ConfigError(name, v, "must be a positive integer or null")
        cf = self.moe_expert_capacity_factor
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float)) or not cf > 0
                               or cf == float("inf")):
            raise ConfigError("moe_expert_capacity_factor", cf,
                              "must be a positive number, or null for dropless (Megatron reads a negative one as null)")
        imb = self.moe_load_imbalance
        if imb is not None and (isinstance(imb, bool) or not isinstance(imb, (int, float))
                                or not 1 <= imb < float("inf")):
            raise ConfigError("moe_load_imbalance", imb, "must be a ratio >= 1 (max/mean tokens per EP rank), or null")
        if imb is not None and self.moe_router_force_load_balancing:
            raise ConfigError("moe_load_imbalance", imb, "is for learned routing; with "
                              "moe_router_force_load_balancing the imbalance is the statistics of random routing")
        if self.moe_router_padding_for_quantization:
            # Megatron-Core TransformerConfig.__post_init__ (d98e8a64)
            if self.dtype not in QUANTIZED_DTYPES:
                raise ConfigError("moe_router_padding_for_quantization", True,
                                  "needs fp8 or fp4 training (Megatron: 'fp8/fp4 must be specified')")
            if self.moe_token_dispatcher == "allgather":
                raise ConfigError("moe_router_padding_for_quantization", True,
                                  "is not supported by the allgather dispatcher (Megatron); use alltoall or flex")
        if self.moe_pad_expert_input_to_capacity and cf is None:
            # Megatron-Core TransformerConfig: "moe_expert_capacity_factor must be set to use
            # moe_pad_expert_input_to_capacity"
            raise ConfigError("moe_pad_expert_input_to_capacity", True, "needs moe_expert_capacity_factor")
        for name in ("recompute_modules", "cuda_graph_scope"):
            v = getattr(self, name)
            if not isinstance(v, (tuple, list)) or not all(isinstance(x, str) for x in v):
                raise ConfigError(name, v, "must be a list of module names")
            if isinstance(v, list):  # a run's JSON (trace, summary) read back: stored as a tuple (hashable)
                object.__setattr__(self, name, tuple(v))
        bad = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise ConfigError("recompute_modules", list(self.recompute_modules),
                              f"unknown module {bad[0]!r}; valid: {', '.join(RECOMPUTE_MODULES)}")
        if self.recompute == "selective" and not self.recompute_modules:
            raise ConfigError("recompute_modules", [], "selective recompute of no module recomputes nothing: "
                                                       "give recompute none (or core_attn)")
        from workload_gen.core.unmodelled import check_modelled

        check_modelled(self)
        self._check_precision_aware()
        self._check_a2a_overlap()
        self._check_param_gather_with_step()
        self._check_flex()

    def _check_flex(self) -> None:
        """Megatron-LM's rule for the deprecated DeepEP switch (transformer_config.py at
        d98e8a64, __post_init__): it needs the flex dispatcher and no other backend."""
        if not self.moe_enable_deepep:
            return
        if self.moe_token_dispatcher != "flex":
            raise ConfigError("moe_enable_deepep", True, "needs moe_token_dispatcher flex "
                              "(--moe-token-dispatcher-type flex), as Megatron requires")
        if self.moe_flex_dispatcher_backend == "hybridep":
            raise ConfigError("moe_enable_deepep", True, "cannot be combined with --moe-flex-dispatcher-backend "
                              "hybridep (Megatron: 'Only one backend is supported for flex token dispatcher')")

    def _check_param_gather_with_step(self) -> None:
        """Megatron-LM's rules (arguments.py at d98e8a64, validate_args)."""
        if not self.overlap_param_gather_with_optimizer_step:
            return
        for ok, why in ((self.distributed_optimizer, "needs the distributed optimizer"),
                        (self.overlap_param_gather, "needs overlap_param_gather (--overlap-param-gather)"),
                        (self.vpp > 1, "needs the interleaved schedule (vpp > 1)")):
            if not ok:
                raise ConfigError("overlap_param_gather_with_optimizer_step", True, why + " (Megatron requires it)")

    def _check_schedule(self) -> None:
        """A named pipeline schedule against the layout (DualPipeV's own asserts in dualpipev.py)."""
        name = self.pipeline_schedule
        if name not in PIPELINE_SCHEDULES:
            raise ConfigError("pipeline_schedule", name, f"valid: {', '.join(PIPELINE_SCHEDULES)}")
        if name == "1f1b" and self.vpp != 1:
            raise ConfigError("pipeline_schedule", name, f"needs vpp=1 (vpp={self.vpp}: use interleaved)")
        if name == "interleaved" and self.vpp == 1:
            raise ConfigError("pipeline_schedule", name, "needs vpp > 1 (vpp=1: use 1f1b)")
        if name != "dualpipev":
            return
        if self.pp < 2 or self.vpp != 2:
            raise ConfigError("pipeline_schedule", name, f"needs pp >= 2 and vpp = 2 (two chunks per rank, the V); "
                                                         f"got pp={self.pp}, vpp={self.vpp}")
        if self.num_microbatches < 2 * self.pp:
            raise ConfigError("global_batch", self.global_batch,
                              f"DualPipeV needs at least 2*pp = {2 * self.pp} micro-batches; this gives "
                              f"{self.num_microbatches} (global_batch / (micro_batch*dp))")
        for field_name in ("first_stage_layers", "last_stage_layers", "account_for_embedding_in_pipeline_split",
                           "account_for_loss_in_pipeline_split"):
            if getattr(self, field_name):
                raise ConfigError("pipeline_schedule", name, f"cannot be combined with {field_name} (Megatron's "
                                  "uneven split assumes its own stage order; give a pipeline_layout instead)")

    @property
    def schedule(self) -> str:
        """The pipeline schedule the engine runs (engine.schedules.SCHEDULES)."""
        return self.pipeline_schedule or ("interleaved" if self.vpp > 1 else "1f1b")

    @property
    def vshape(self) -> bool:
        """DualPipeV's placement of the virtual stages (workload_gen.core.virtual_stages)."""
        return self.pipeline_schedule == "dualpipev"

    def _check_a2a_overlap(self) -> None:
        """Megatron-LM's own rules for the EP all-to-all overlap (transformer_config.py at
        d98e8a64, __post_init__): each refused combination is one Megatron asserts."""
        if self.delay_wgrad_compute and not self.overlap_moe_expert_parallel_comm:
            raise ConfigError("delay_wgrad_compute", True, "needs overlap_moe_expert_parallel_comm "
                              "(--overlap-moe-expert-parallel-comm), as Megatron requires")
        if not self.overlap_moe_expert_parallel_comm:
            return
        rules = ((self.ep > 1, "needs expert parallelism (ep > 1)"),
                 (self.pp == 1 or self.vpp > 1, "needs virtual pipeline stages (vpp > 1) when pp > 1"),
                 (self.recompute != "full", "cannot be combined with full recompute"),
                 ("moe" not in self.recompute_modules or self.recompute != "selective",
                  "cannot be combined with recompute of the whole MoE layer (recompute_modules moe)"),
                 (not self.moe_shared_expert_overlap, "cannot be combined with moe_shared_expert_overlap"))
        for ok, why in rules:
            if not ok:
                raise ConfigError("overlap_moe_expert_parallel_comm", True, why + " (Megatron requires it)")
    def _check_precision_aware(self) -> None:
        """Megatron's own rules for the precision-aware optimizer's options (Megatron-LM at
        d98e8a64: optimizer_config.py asserts the dtypes stay fp32 without the flag and the
        optimizer is adam with it; optimizer/__init__.py raises without the distributed
        optimizer; arguments.py reads --main-grads-dtype only with --bf16, and asserts it is
        fp32 under --accumulate-allreduce-grads-in-fp32)."""
        low = [n for n in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
               if getattr(self, n) != "fp32"]
        if not self.use_precision_aware_optimizer:
            if low:
                raise ConfigError(low[0], getattr(self, low[0]), "needs use_precision_aware_optimizer "
                                  "(--use-precision-aware-optimizer); without it Megatron keeps it fp32")
            return
        if not self.distributed_optimizer:
            raise ConfigError("use_precision_aware_optimizer", True, "needs distributed_optimizer "
                              "(Megatron: 'only supported with distributed optimizer')")
        if self.optimizer != "adam":
            raise ConfigError("use_precision_aware_optimizer", True, "only supported with adam (Megatron)")
        if self.main_grads_dtype != "fp32" and self.dtype not in ("bf16", "fp8", "fp4"):
            raise ConfigError("main_grads_dtype", self.main_grads_dtype,
                              "Megatron reads --main-grads-dtype only with --bf16 (bf16 or fp8 training)")
        if self.main_grads_dtype != "fp32" and self.grad_reduce_in_fp32:
            raise ConfigError("main_grads_dtype", self.main_grads_dtype,
                              "can only be fp32 with --accumulate-allreduce-grads-in-fp32 (Megatron)")

    def _check_pipeline_layout(self) -> None:
        """The layout against pp and vpp, and exclusive of the other ways to split the layers
        (Megatron-Core's TransformerConfig asserts the same); the model's counts are checked in
        :func:`check_against_model`."""
        from workload_gen.core.pipeline_layout import parse_layout

        text = self.pipeline_layout
        if not isinstance(text, str):
            raise ConfigError("pipeline_layout", text, "must be a string such as 'Et*3|(tt|)*29,m|L'")
        for name in ("first_stage_layers", "last_stage_layers", "account_for_embedding_in_pipeline_split",
                     "account_for_loss_in_pipeline_split"):
            if getattr(self, name):
                raise ConfigError("pipeline_layout", text, f"cannot be combined with {name} (the layout "
                                                           "already places every layer)")
        layout = parse_layout(text, self.pp)
        if layout.vpp != self.vpp:
            raise ConfigError("pipeline_layout", text,
                              f"has {len(layout.stages)} virtual stages = pp {self.pp} x vpp {layout.vpp}, "
                              f"but vpp={self.vpp}; set vpp={layout.vpp} (or leave vpp unset in the YAML)")

    # --- derived -----------------------------------------------------------------
    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def flex_backend(self) -> str | None:
        """The flex dispatcher's backend (deepep, hybridep, ncclep), or None for the alltoall and
        allgather dispatchers. ``--moe-enable-deepep`` is Megatron's deprecated spelling of flex
        with DeepEP (it needs the flex dispatcher: ``_check_flex``)."""
        if self.moe_token_dispatcher != "flex":
            return None
        return "deepep" if self.moe_enable_deepep else self.moe_flex_dispatcher_backend

    @property
    def routed_tokens(self) -> int:
        """Tokens one rank routes to the experts per micro-batch: its s/cp x b, sharded over
        TP by sequence parallelism (each rank of an EP group routes as many)."""
        return self.seq_length // self.cp * self.micro_batch // (self.tp if self.sp else 1)

    @property
    def edp(self) -> int:
        """Expert data-parallel size: the ranks holding a copy of the same experts."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @property
    def num_microbatches(self) -> int:
        """Gradient-accumulation steps = global / (micro * dp)."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def deferred_wgrad_microbatches(self) -> int:
        """Micro-batches whose output-layer wgrad defer_embedding_wgrad_compute moves into
        the pipeline flush (0 without it; a limit of 0 means every one)."""
        if not self.defer_embedding_wgrad_compute:
            return 0
        n = self.num_microbatches
        return n if self.wgrad_deferral_limit == 0 else min(self.wgrad_deferral_limit, n)

    def _check_fp4(self) -> None:
        """Megatron's FP4 and bf16-layer asserts (arguments.py validate_args and
        TransformerConfig.__post_init__, the same at 2edffadb and HEAD), one line each."""
        if self.fp4_recipe not in FP4_RECIPES:
            raise ConfigError("fp4_recipe", self.fp4_recipe, f"valid: {', '.join(FP4_RECIPES)}")
        if self.dtype == "fp4" and self.fp4_recipe == "custom":
            raise ConfigError("fp4_recipe", "custom", "not modelled: a custom quantizer factory's kernels are "
                                                      "unknown; valid: nvfp4")
        for name in ("fp4_param_gather", "first_last_layers_bf16"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        if self.fp4_param_gather and self.dtype != "fp4":
            raise ConfigError("fp4_param_gather", True, "must be used together with fp4 training "
                                                        "(--fp4-format e2m1), as Megatron asserts")
        if self.fp4_param_gather and self.first_last_layers_bf16:
            raise ConfigError("fp4_param_gather", True, "not modelled with first_last_layers_bf16 (which weights "
                                                        "stay bf16 in the gather buffers)")
        for name in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(name, v, "must be an integer >= 0")
        if self.first_last_layers_bf16 and self.dtype == "fp8" and self.fp8_recipe == "delayed":
            raise ConfigError("first_last_layers_bf16", True, "delayed scaling does not support first/last layers "
                                                              "in bf16 (Megatron); use fp8_recipe tensorwise, mxfp8 "
                                                              "or blockwise")

    @property
    def bf16_layer_span(self) -> tuple[int, int]:
        """(first, last) global transformer layers kept in bf16 under fp8/fp4: layers below
        ``first`` and from ``num_layers - last`` on (Megatron's get_fp8_context /
        get_fp4_context); (0, 0) when none are (no quantized dtype, or the switch off)."""
        if self.dtype not in QUANTIZED_DTYPES or not self.first_last_layers_bf16:
            return 0, 0
        return self.num_layers_at_start_in_bf16, self.num_layers_at_end_in_bf16

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element in the DP reduction (main-grad dtype)."""
        # Megatron leaves fp32 accumulation off for bf16 when --main-grads-dtype bf16
        # (arguments.py at d98e8a64); the DDP then allocates the grad buffer in bf16.
        fp32 = self.grad_reduce_in_fp32 if self.grad_reduce_in_fp32 is not None else (
            self.dtype in ("bf16", "fp8", "fp4", "fp32") and self.main_grads_dtype == "fp32")
        return 4 if fp32 or self.dtype == "fp32" else 2

    @property
    def param_bytes(self) -> int:
        """Bytes per model-weight element (fp8 and fp4 training keep bf16 weights)."""
        return 2 if self.dtype in QUANTIZED_DTYPES else self.dtype_bytes

    @property
    def bucket_elements(self) -> int:
        if self.ddp_bucket_size is not None:
            return self.ddp_bucket_size
        return max(40_000_000, 1_000_000 * self.dp * self.cp)

    def to_dict(self) -> dict[str, object]:
        """Every field, except those in :data:`OMITTED_AT_DEFAULT` while they hold their
        default: files written before such a field existed stay byte-identical, and readers
        fill in the default."""
        return fields_dict(self, OMITTED_AT_DEFAULT)


PARALLEL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ParallelConfig))

RECIPE_FIELDS: tuple[str, ...] = PARALLEL_FIELDS[
    PARALLEL_FIELDS.index("moe_token_dispatcher"):PARALLEL_FIELDS.index("use_megatron_fsdp") + 1]
"""The MoE and recipe options (Megatron flags): accepted, modelled or refused by
workload_gen.core.unmodelled."""

_RECIPE_VALUES = attrgetter(*RECIPE_FIELDS)
_RECIPE_DEFAULTS: tuple[object, ...] = tuple(f.default for f in fields(ParallelConfig) if f.name in RECIPE_FIELDS)
"""The recipe options at their defaults: nothing to check (sweeps build many configs)."""

OMITTED_AT_DEFAULT: frozenset[str] = frozenset({"pipeline_layout", "pipeline_schedule", *RECIPE_FIELDS})
"""Fields added after the file formats were fixed: written only when set (see to_dict)."""


def pipeline_slots(num_layers: int, par: ParallelConfig) -> int:
    """Layer slots the pipeline split divides over pp*vpp virtual stages: the layers, plus one
    for the embedding and one for the loss where Megatron accounts for them in the split."""
    return num_layers + int(par.account_for_embedding_in_pipeline_split) + int(par.account_for_loss_in_pipeline_split)


def _check_mamba_layout(model: ModelConfig, par: ParallelConfig) -> None:
    """The Mamba layers' rules (MambaMixer asserts, mamba_mixer.py @d98e8a64): TP splits the
    heads and the groups, so tp divides both. Context parallelism of the Mamba layers
    (MambaContextParallel's all-to-alls to head shards) is not modelled and refused."""
    heads, groups = model.mamba_heads, model.mamba_num_groups
    if heads % par.tp or groups % par.tp:
        raise ConfigError("tp", par.tp, f"must divide the Mamba heads ({heads}) and groups ({groups}); "
                                        f"valid tp: {_divisors(math.gcd(heads, groups))}")
    if par.cp > 1:
        raise ConfigError("cp", par.cp, "not modelled: context parallelism of Mamba layers (the all-to-alls "
                                        "of MambaContextParallel); use cp 1 with a hybrid model")


def check_against_model(model: ModelConfig, par: ParallelConfig) -> None:
    """Divisibility rules between the model and the layout; first failure wins."""
    heads, kv = model.num_attention_heads, model.kv_heads
    # one list of valid tp for both rules (issue 29: --tp 3 listed 16 and 32, which the KV-group
    # rule then refused): the divisors of the heads that also divide the KV groups
    tp_unit = heads if model.multi_latent_attention else math.gcd(heads, kv)
    if heads % par.tp:
        raise ConfigError("tp", par.tp, f"num_attention_heads={heads} is not divisible by tp; valid tp: {_divisors(tp_unit)}")
    if not model.multi_latent_attention and kv % par.tp:
        raise ConfigError("tp", par.tp, f"num_query_groups={kv} is not divisible by tp; valid tp: {_divisors(tp_unit)}")
    if model.hybrid_layer_pattern is not None and "M" in model.hybrid_layer_pattern:
        _check_mamba_layout(model, par)
    from workload_gen.core.unmodelled import check_modelled_with_model

    check_modelled_with_model(model, par)
    stages = par.pp * par.vpp
    first, last = par.first_stage_layers, par.last_stage_layers
    if par.pipeline_layout is not None:
        from workload_gen.core.pipeline_layout import check_layout, parse_layout

        layout = parse_layout(par.pipeline_layout, par.pp)
        check_layout(layout, par.pipeline_layout, model.num_layers, model.mtp_num_layers)
        per_chunk_min = min((s.count("t") for s in layout.stages if "t" in s), default=0)
    elif first is not None or last is not None:
        middle = par.pp - (first is not None) - (last is not None)
        rest = model.num_layers - (first or 0) - (last or 0)
        if rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
            raise ConfigError(
                "pp", par.pp,
                f"num_layers={model.num_layers} minus first/last stage layers ({first}, {last}) = {rest} "
                f"must split evenly over the other {middle} stage(s)",
            )
        if middle and (rest // middle) % par.vpp:
            # Megatron-Core (TransformerConfig): every virtual stage of a middle rank holds the same
            raise ConfigError(
                "pp", par.pp,
                f"the {rest // middle} layers of each middle stage (num_layers={model.num_layers} minus first/last "
                f"({first}, {last}) over {middle} stages) must be divisible by vpp={par.vpp}",
            )
        sizes = [x for x in (first, last) if x is not None] + ([rest // middle] if middle else [])
        per_chunk_min = min(sizes) // par.vpp
        if per_chunk_min < 1:
            raise ConfigError("pp", par.pp, f"every pipeline stage needs at least one layer (got {sizes})")
    elif par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split:
        e, l = int(par.account_for_embedding_in_pipeline_split), int(par.account_for_loss_in_pipeline_split)
        slots = pipeline_slots(model.num_layers, par)
        if slots % stages:
            raise ConfigError(
                "pp", par.pp,
                f"num_layers={model.num_layers} plus the {'embedding and loss' if e and l else 'embedding' if e else 'loss'}"
                f" slot{'s' if e and l else ''} = {slots} is not divisible by pp*vpp={par.pp}*{par.vpp}={stages}",
            )
        # Megatron-LM accepts a first (last) virtual stage that holds only the embedding (loss)
        # when those take a slot of their own (Llama 3.1 405B on 16 x 8 virtual stages, NVIDIA's
        # GB200 recipe): per_chunk_min may be 0; it cannot go below (slots // stages >= 1).
        per_chunk_min = slots // stages - (max(e, l) if stages > 1 else e + l)
    elif model.num_layers % stages:
        raise ConfigError(
            "pp", par.pp,
            f"num_layers={model.num_layers} is not divisible by pp*vpp={par.pp}*{par.vpp}={stages}"
            + ("; or give the first/last stage fewer layers (--first-stage-layers, --last-stage-layers)"
               if par.pp > 2 else ""),
        )
    else:
        per_chunk_min = model.num_layers // stages
    if model.vocab_size < par.tp:
        raise ConfigError("vocab_size", model.vocab_size, f"must be at least tp={par.tp}")
    if par.dtype == "fp8" and par.first_last_layers_bf16:
        # TransformerConfig.__post_init__ checks the counts under fp8 only (not under fp4)
        most = model.num_layers // par.pp
        for name in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            if getattr(par, name) > most:
                raise ConfigError(name, getattr(par, name), f"must be between 0 and the layers per pipeline "
                                                            f"stage ({most}), as Megatron asserts under fp8")
    if model.is_moe:
        if model.num_experts % par.ep:
            raise ConfigError(
                "ep", par.ep,
                f"num_experts={model.num_experts} is not divisible by ep; valid ep: {_divisors(model.num_experts)}",
            )
        if model.expert_ffn % par.expert_tp:
            raise ConfigError("etp", par.expert_tp, f"moe_ffn_hidden_size={model.expert_ffn} is not divisible by it")
    elif par.ep > 1:
        raise ConfigError("ep", par.ep, "expert parallelism needs an MoE model (num_experts > 0)")
    widths = []
    if model.has_dense_layers:  # leading dense layers or an interleaved pattern (Llama 4 Maverick)
        widths.append(("ffn_hidden_size" if not model.is_moe or model.dense_ffn_hidden_size is None
                       else "dense_ffn_hidden_size", model.dense_ffn))
    if model.is_moe and model.moe_shared_expert_intermediate_size:
        widths.append(("moe_shared_expert_intermediate_size", model.moe_shared_expert_intermediate_size))
        if par.moe_shared_expert_overlap:
            # Megatron-Core TransformerConfig.__post_init__ (2edffadb): both refused with shared experts
            if par.moe_token_dispatcher != "alltoall":
                raise ConfigError("moe_shared_expert_overlap", True,
                                  "only works with moe_token_dispatcher alltoall (Megatron requires it)")
            if par.recompute == "selective" and "shared_experts" in par.recompute_modules:
                raise ConfigError("moe_shared_expert_overlap", True,
                                  "cannot be combined with recompute_modules shared_experts (Megatron requires it)")
    for name, width in widths:
        if width % par.tp:
            raise ConfigError("tp", par.tp, f"{name}={width} is not divisible by tp")
    if model.position_embedding == "learned" and par.seq_length > model.max_position_embeddings:
        raise ConfigError(
            "seq_length", par.seq_length,
            f"exceeds max_position_embeddings={model.max_position_embeddings} of the learned position table",
        )
    if model.is_moe and par.tp > 1 and not par.sp:
        raise ConfigError("sp", False, "MoE models with tp > 1 need sequence parallelism (Megatron-Core's MoE layer requires it)")
    if par.recompute == "full" and par.recompute_num_layers is not None:
        if par.recompute_num_layers > max(per_chunk_min, 1):
            raise ConfigError(
                "recompute_num_layers", par.recompute_num_layers,
                f"must be at most the layers per pipeline chunk ({per_chunk_min})",
            )
    if model.mtp_num_layers and par.recompute == "full" and par.recompute_method == "uniform" \
            and (par.recompute_num_layers or 1) != 1:
        # Megatron-Core's MultiTokenPredictionLayer._checkpointed_forward asserts the same
        raise ConfigError("recompute_num_layers", par.recompute_num_layers,
                          "must be 1 for MTP recompute (uniform full recompute with mtp_num_layers)")
    if model.mtp_num_layers and par.deferred_wgrad_microbatches:
        raise ConfigError("defer_embedding_wgrad_compute", True, "not modelled with mtp_num_layers: the MTP head "
                          "passes' deferred output-layer wgrads (Megatron-Core's embedding_activation_buffer)")
    if par.cp > 1 and par.cp_comm == "a2a":
        kv_local = (heads if model.multi_latent_attention else kv) // par.tp
        if (heads // par.tp) % par.cp or kv_local % par.cp:
            raise ConfigError(
                "cp", par.cp,
                f"cp_comm=a2a splits the heads of each TP rank (q {heads // par.tp}, kv {kv_local}) over cp; "
                "they must be divisible by it",
            )
    if par.sp and (par.seq_length // par.cp) % par.tp:
        raise ConfigError("seq_length", par.seq_length, f"with sp, seq_length/cp must be divisible by tp={par.tp}")
    if par.recompute == "selective" and "mla_up_proj" in par.recompute_modules and not model.multi_latent_attention:
        # Megatron-Core TransformerConfig raises the same
        raise ConfigError("recompute_modules", list(par.recompute_modules),
                          "mla_up_proj needs multi-latent attention (--multi-latent-attention)")
