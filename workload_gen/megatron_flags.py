"""Megatron-LM's command-line flags as data: what each one sets, and which are ignored or refused.

The command that parses a Megatron launch line (engine/commands/config_flags.py) builds its
parser from these tables; :func:`workload_gen.flag_values.flags_to_dict` turns the parsed
values into the YAML-shaped dict. Nothing here parses arguments, so a new Megatron flag is
one row in one table:

- :data:`MODEL_VALUE_FLAGS`, :data:`MODEL_SWITCHES`: flags that set a ModelConfig field;
- :data:`PAR_VALUE_FLAGS`, :data:`PAR_BOOL_FLAGS`, :data:`PAR_LIST_FLAGS`,
  :data:`PAR_SWITCHES`: flags that set a ParallelConfig field (our short spelling first,
  Megatron's as aliases); a recipe option whose mechanism is not modelled yet sets its
  field too, and :mod:`workload_gen.core.unmodelled` refuses any value but the no-op;
- :data:`IGNORED_MEGATRON_FLAGS`: real flags that change neither shapes nor communication,
  accepted with one note;
- :data:`NOT_MODELLED_MEGATRON_FLAGS`: real flags that would change the iteration, refused
  with the reason unless given the value that changes nothing.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import moe_layer_layout, parse_layer_pattern
from workload_gen.core.parallel_config import (
    CP_COMMS,
    DTYPE_BYTES,
    FP4_RECIPES,
    FP8_RECIPES,
    OPTIMIZERS,
    PIPELINE_SCHEDULES,
    RECIPE_CHOICES,
    RECOMPUTE_METHODS,
    RECOMPUTE_MODULES,
    RECOMPUTES,
)

# (flags, field, type): the command's dest is the field prefixed m_ (model) or p_ (parallel/training).
MODEL_VALUE_FLAGS: tuple[tuple[tuple[str, ...], str, type], ...] = (
    (("--num-layers",), "num_layers", int),
    (("--hidden-size",), "hidden_size", int),
    (("--ffn-hidden-size",), "ffn_hidden_size", int),
    (("--num-attention-heads",), "num_attention_heads", int),
    (("--num-query-groups",), "num_query_groups", int),
    (("--kv-channels",), "kv_channels", int),
    (("--vocab-size",), "vocab_size", int),
    (("--max-position-embeddings",), "max_position_embeddings", int),
    (("--num-experts",), "num_experts", int),
    (("--moe-router-topk",), "moe_router_topk", int),
    (("--moe-ffn-hidden-size",), "moe_ffn_hidden_size", int),
    (("--moe-shared-expert-intermediate-size",), "moe_shared_expert_intermediate_size", int),
    (("--num-dense-layers",), "num_dense_layers", int),
    (("--dense-ffn-hidden-size",), "dense_ffn_hidden_size", int),
    (("--q-lora-rank",), "q_lora_rank", int),
    (("--kv-lora-rank",), "kv_lora_rank", int),
    (("--qk-head-dim",), "qk_head_dim", int),
    (("--qk-pos-emb-head-dim",), "qk_pos_emb_head_dim", int),
    (("--v-head-dim",), "v_head_dim", int),
    (("--window-size",), "window_size", str),  # (left,right): MODEL_VALUE_CONVERTERS
    (("--window-attn-skip-freq",), "window_attn_skip_freq", str),
    (("--no-rope-freq",), "no_rope_freq", str),
    (("--softmax-type",), "softmax_type", str),  # vanilla, off-by-one, learnable (GPT-OSS's sinks)
    (("--mtp-num-layers",), "mtp_num_layers", int),
    (("--activation",), "activation", str),
    (("--activation-func-clamp-value",), "activation_clamp", float),
    (("--normalization",), "normalization", str),
    (("--position-embedding-type",), "position_embedding", str),
    # YaRN (Megatron-LM d98e8a64: --position-embedding-type yarn; argument_utils.
    # _apply_yarn_config_from_args maps these onto the config's yarn_* fields)
    (("--rotary-scaling-factor",), "yarn_scaling_factor", float),
    (("--mscale",), "yarn_mscale", float),
    (("--mscale-all-dim",), "yarn_mscale_all_dim", float),
    # Hybrid Mamba-Transformer models (Nemotron-H, Nemotron-3): --hybrid-override-pattern is
    # Megatron's deprecated spelling of --hybrid-layer-pattern (arguments.py @d98e8a64)
    (("--hybrid-layer-pattern", "--hybrid-override-pattern"), "hybrid_layer_pattern", str),
    (("--mamba-num-heads",), "mamba_num_heads", int),
    (("--mamba-head-dim",), "mamba_head_dim", int),
    (("--mamba-state-dim",), "mamba_state_dim", int),
    (("--mamba-num-groups",), "mamba_num_groups", int),
)
# Megatron boolean switches that set a model field to a constant.
MODEL_SWITCHES: tuple[tuple[str, str, object], ...] = (
    ("--swiglu", "activation", "swiglu"),
    # GPT-OSS's gated activation (Megatron --quick-geglu: gelu approximated as x*sigmoid(1.702x),
    # times the linear half): fc1 has swiglu's two halves and the same elementwise pass, so it
    # takes swiglu's shapes and costs (flag_values sets activation swiglu with it); its offset
    # constant (--glu-linear-offset) changes no shape and no pass and is ignored; the clamp
    # (--activation-func-clamp-value) adds passes; the gate adds a host sync (activation_gate).
    ("--quick-geglu", "activation_gate", "quick_gelu"),
    ("--squared-relu", "activation", "squared_relu"),
    ("--untie-embeddings-and-output-weights", "tied_embeddings", False),
    ("--disable-bias-linear", "add_bias_linear", False),
    ("--add-qkv-bias", "add_qkv_bias", True),
    ("--qk-layernorm", "qk_layernorm", True),
    ("--multi-latent-attention", "multi_latent_attention", True),
    ("--use-rotary-position-embeddings", "position_embedding", "rope"),
)

PAR_VALUE_FLAGS: tuple[tuple[tuple[str, ...], str, type, tuple[str, ...] | None], ...] = (
    (("--world-size",), "world_size", int, None),
    (("--tp", "--tensor-model-parallel-size"), "tp", int, None),
    (("--pp", "--pipeline-model-parallel-size"), "pp", int, None),
    (("--vpp", "--num-virtual-stages-per-pipeline-rank"), "vpp", int, None),
    (("--num-layers-per-virtual-pipeline-stage",), "num_layers_per_virtual_pipeline_stage", int, None),
    (("--cp", "--context-parallel-size"), "cp", int, None),
    (("--cp-comm", "--cp-comm-type"), "cp_comm", str, CP_COMMS),
    (("--first-stage-layers", "--decoder-first-pipeline-num-layers"), "first_stage_layers", int, None),
    (("--last-stage-layers", "--decoder-last-pipeline-num-layers"), "last_stage_layers", int, None),
    (("--ep", "--expert-model-parallel-size"), "ep", int, None),
    (("--etp", "--expert-tensor-parallel-size"), "etp", int, None),
    (("--pp-layout", "--pipeline-model-parallel-layout"), "pipeline_layout", str, None),
    (("--pipeline-schedule",), "pipeline_schedule", str, PIPELINE_SCHEDULES),
    (("--micro-batch", "--micro-batch-size"), "micro_batch", int, None),
    (("--global-batch", "--global-batch-size"), "global_batch", int, None),
    (("--seq-length",), "seq_length", int, None),
    (("--dtype",), "dtype", str, tuple(DTYPE_BYTES)),
    (("--fp8-recipe",), "fp8_recipe", str, FP8_RECIPES),
    (("--fp4-recipe",), "fp4_recipe", str, FP4_RECIPES),  # --fp4-format e2m1 (config_flags) sets dtype fp4
    (("--num-layers-at-start-in-bf16",), "num_layers_at_start_in_bf16", int, None),
    (("--num-layers-at-end-in-bf16",), "num_layers_at_end_in_bf16", int, None),
    (("--recompute", "--recompute-granularity"), "recompute", str, RECOMPUTES),
    (("--recompute-method",), "recompute_method", str, RECOMPUTE_METHODS),
    (("--recompute-num-layers",), "recompute_num_layers", int, None),
    (("--ddp-bucket-size",), "ddp_bucket_size", int, None),
    (("--optimizer",), "optimizer", str, OPTIMIZERS),  # Megatron's adam, NeMo's optim.name
    (("--clip-grad",), "clip_grad", float, None),
    (("--make-vocab-size-divisible-by",), "make_vocab_size_divisible_by", int, None),
    (("--wgrad-deferral-limit",), "wgrad_deferral_limit", int, None),
    # MoE and recipe options (ParallelConfig's last block; workload_gen.core.unmodelled refuses
    # the values whose mechanism is not modelled yet)
    (("--moe-token-dispatcher-type",), "moe_token_dispatcher", str, RECIPE_CHOICES["moe_token_dispatcher"]),
    (("--moe-flex-dispatcher-backend",), "moe_flex_dispatcher_backend", str,
     RECIPE_CHOICES["moe_flex_dispatcher_backend"]),
    # Megatron-LM d98e8a64 unifies the per-backend SM counts as --moe-flex-dispatcher-num-sms
    # (transformer_config.py; --moe-hybridep-num-sms and --moe-deepep-num-sms are its deprecated
    # spellings, routed to it): one field here for all three
    (("--moe-flex-dispatcher-num-sms", "--moe-hybridep-num-sms", "--moe-deepep-num-sms"), "moe_hybridep_num_sms",
     int, None),
    (("--moe-expert-capacity-factor",), "moe_expert_capacity_factor", float, None),
    (("--moe-load-imbalance",), "moe_load_imbalance", float, None),  # ours: Megatron has none
    (("--moe-router-num-groups",), "moe_router_num_groups", int, None),
    (("--moe-router-group-topk",), "moe_router_group_topk", int, None),
    (("--cuda-graph-impl",), "cuda_graph_impl", str, RECIPE_CHOICES["cuda_graph_impl"]),
    (("--main-params-dtype",), "main_params_dtype", str, RECIPE_CHOICES["main_params_dtype"]),
    (("--main-grads-dtype",), "main_grads_dtype", str, RECIPE_CHOICES["main_grads_dtype"]),
    (("--exp-avg-dtype",), "exp_avg_dtype", str, RECIPE_CHOICES["exp_avg_dtype"]),
    (("--exp-avg-sq-dtype",), "exp_avg_sq_dtype", str, RECIPE_CHOICES["exp_avg_sq_dtype"]),
)
# Our on/off switches (each also has --no-...); the Megatron spelling is an alias.
PAR_BOOL_FLAGS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--sp", "--sequence-parallel"), "sp"),
    (("--dist-opt", "--use-distributed-optimizer"), "distributed_optimizer"),
    (("--overlap-grad-reduce",), "overlap_grad_reduce"),
    (("--overlap-param-gather",), "overlap_param_gather"),
    (("--tp-comm-overlap",), "tp_comm_overlap"),
    (("--overlap-p2p-communication",), "overlap_p2p_comm"),
    (("--grad-reduce-in-fp32", "--accumulate-allreduce-grads-in-fp32"), "grad_reduce_in_fp32"),
    (("--account-for-embedding-in-pipeline-split",), "account_for_embedding_in_pipeline_split"),
    (("--account-for-loss-in-pipeline-split",), "account_for_loss_in_pipeline_split"),
    (("--defer-embedding-wgrad-compute",), "defer_embedding_wgrad_compute"),
    (("--moe-enable-deepep",), "moe_enable_deepep"),
    (("--overlap-moe-expert-parallel-comm",), "overlap_moe_expert_parallel_comm"),
    (("--delay-wgrad-compute",), "delay_wgrad_compute"),
    (("--moe-shared-expert-overlap",), "moe_shared_expert_overlap"),
    (("--moe-pad-expert-input-to-capacity",), "moe_pad_expert_input_to_capacity"),
    (("--moe-router-force-load-balancing",), "moe_router_force_load_balancing"),
    (("--moe-permute-fusion",), "moe_permute_fusion"),
    (("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8"), "moe_router_padding_for_quantization"),
    (("--fp8-param-gather",), "fp8_param_gather"),
    (("--fp4-param-gather",), "fp4_param_gather"),
    (("--first-last-layers-bf16",), "first_last_layers_bf16"),
    (("--reuse-grad-buf-for-mxfp8-param-ag",), "reuse_grad_buf_for_mxfp8_param_ag"),
    (("--tp-only-amax-red",), "tp_only_amax_red"),
    (("--use-precision-aware-optimizer",), "use_precision_aware_optimizer"),
    (("--overlap-param-gather-with-optimizer-step",), "overlap_param_gather_with_optimizer_step"),
    (("--use-megatron-fsdp", "--use-custom-fsdp"), "use_megatron_fsdp"),
    (("--gradient-accumulation-fusion",), "gradient_accumulation_fusion"),
    (("--rope-fusion",), "rope_fusion"),  # Megatron: --no-rope-fusion (apply_rope_fusion False)
)
# Megatron flags that take several values (nargs='+') and set a tuple field: (flags, field, choices).
PAR_LIST_FLAGS: tuple[tuple[tuple[str, ...], str, tuple[str, ...] | None], ...] = (
    (("--recompute-modules",), "recompute_modules", RECOMPUTE_MODULES),
    (("--cuda-graph-scope", "--cuda-graph-modules"), "cuda_graph_scope", None),
)
# Megatron switches that set a ParallelConfig field to a constant: (flag, field, value).
PAR_SWITCHES: tuple[tuple[str, str, object], ...] = (
    ("--grad-reduce-in-bf16", "grad_reduce_in_fp32", False),  # Megatron: accumulate_allreduce_grads_in_fp32 = False
    ("--enable-cuda-graph", "cuda_graph_impl", "local"),  # Megatron's deprecated spellings of --cuda-graph-impl
    ("--external-cuda-graph", "cuda_graph_impl", "transformer_engine"),
    ("--moe-layer-recompute", "moe_layer_recompute", True),  # deprecated: selective + "moe" (flag_values)
)
SWITCH_HELP: dict[str, str] = {
    "--moe-layer-recompute": "Megatron's deprecated switch: selective recompute with moe added to the modules "
                             "(YAML training.recompute: selective, training.recompute_modules: [core_attn, moe])",
}
"""--help of the switches in PAR_SWITCHES that set more than one field."""

IGNORED_MEGATRON_FLAGS: dict[str, bool] = {
    # flag: takes a value. Real Megatron-LM flags that change neither the computation's
    # shapes nor its communication (optimizer hyper-parameters, data, logging,
    # checkpointing, kernel-fusion switches whose cost the profile measures anyway).
    "--lr": True, "--min-lr": True, "--lr-decay-style": True, "--lr-decay-iters": True,
    "--lr-warmup-iters": True, "--lr-warmup-fraction": True, "--lr-warmup-samples": True,
    "--lr-decay-samples": True, "--weight-decay": True,
    "--adam-beta1": True, "--adam-beta2": True, "--adam-eps": True,
    "--init-method-std": True, "--train-iters": True, "--train-samples": True, "--seed": True,
    "--save": True, "--load": True, "--save-interval": True, "--eval-interval": True,
    "--eval-iters": True, "--log-interval": True, "--data-path": True, "--split": True,
    "--tokenizer-type": True, "--tokenizer-model": True, "--vocab-file": True, "--merge-file": True,
    "--data-cache-path": True, "--num-workers": True, "--distributed-backend": True,
    "--distributed-timeout-minutes": True, "--attention-dropout": True, "--hidden-dropout": True,
    "--norm-epsilon": True, "--rotary-base": True, "--rotary-percent": True,
    "--transformer-impl": True,
    "--tensorboard-dir": True, "--wandb-project": True, "--wandb-exp-name": True,
    # The MoE router's options below pick the loss terms, score function, scaling, dtype and
    # bias of the router op (one small op per layer the compute profile measures as a whole);
    # none moves a token or changes a GEMM shape under the workload's uniform routing.
    # --moe-token-drop-policy picks which tokens a capacity drops, not how many.
    "--moe-router-load-balancing-type": True, "--moe-aux-loss-coeff": True,
    "--moe-z-loss-coeff": True, "--moe-grouped-gemm": False,
    "--moe-router-score-function": True, "--moe-router-topk-scaling-factor": True,
    "--moe-router-dtype": True, "--moe-input-jitter-eps": True, "--loss-scale": True,
    "--initial-loss-scale": True, "--min-loss-scale": True, "--loss-scale-window": True,
    "--hysteresis": True, "--ckpt-format": True, "--exit-interval": True, "--exit-duration-in-mins": True,
    # GPT-OSS's --quick-geglu constant: the linear half's offset (an elementwise constant of a
    # pass that is costed anyway).
    "--glu-linear-offset": True,
    "--use-flash-attn": False, "--use-mcore-models": False, "--no-masked-softmax-fusion": False,
    "--no-bias-gelu-fusion": False, "--no-bias-dropout-fusion": False, "--no-bias-swiglu-fusion": False,
    "--attention-softmax-in-fp32": False, "--apply-query-key-layer-scaling": False,
    "--no-async-tensor-model-parallel-allreduce": False, "--use-checkpoint-args": False,
    "--no-load-optim": False, "--no-load-rng": False, "--no-save-optim": False, "--no-save-rng": False,
    "--log-throughput": False, "--log-timers-to-tensorboard": False, "--log-params-norm": False,
    "--log-num-zeros-in-grad": False, "--timing-log-level": True, "--eval-only": False,
    "--mock-data": False, "--no-create-attention-mask-in-dataloader": False,
    "--manual-gc": False, "--manual-gc-interval": True, "--use-legacy-models": False,
    "--ckpt-fully-parallel-save": False, "--bias-swiglu-fusion": False, "--cross-entropy-loss-fusion": False,
}
IGNORED_MEGATRON_FLAGS.update({
    # From Megatron-LM's megatron/training/arguments.py (and the dataclass configs it builds
    # flags from): RoPE frequency scaling, numerics checks, checkpoint formats, kernel
    # choices, FP8 scaling bookkeeping, NCCL tuning files, logging and profiling switches.
    "--use-rope-scaling": False, "--rope-scaling-factor": True,
    # YaRN's frequency corrections (Megatron-LM d98e8a64 arguments.py; its --rotary-scaling-factor,
    # --mscale and --mscale-all-dim are model fields): they change the frequencies, not a kernel
    "--yarn-original-max-position-embeddings": True, "--yarn-beta-fast": True, "--yarn-beta-slow": True,
    "--yarn-correction-range-round-to-int": False, "--no-yarn-correction-range-round-to-int": False,
    "--rotary-seq-len-interpolation-factor": True,
    "--check-for-nan-in-loss-and-grad": False, "--no-check-for-nan-in-loss-and-grad": False,
    "--check-for-spiky-loss": False, "--check-for-large-grads": False, "--rerun-mode": True,
    "--check-weight-hash-across-dp-replicas-interval": True,
    "--use-dist-ckpt": False, "--auto-detect-ckpt-format": False, "--async-save": False,
    "--use-persistent-ckpt-worker": False, "--ckpt-fully-parallel-load": False,
    "--ckpt-assume-constant-structure": False, "--dist-ckpt-strictness": True, "--ckpt-step": True,
    "--non-persistent-save-interval": True, "--non-persistent-ckpt-type": True,
    "--non-persistent-global-ckpt-dir": True, "--pretrained-checkpoint": True, "--finetune": False,
    "--exit-on-missing-checkpoint": False, "--exit-signal-handler": False,
    "--override-opt_param-scheduler": False, "--use-checkpoint-opt_param-scheduler": False,
    "--no-persist-layer-norm": False, "--apply-layernorm-1p": False, "--calculate-per-token-loss": False,
    "--tp-comm-overlap-cfg": True, "--nccl-communicator-config-path": True,
    "--fp8-amax-history-len": True, "--fp8-amax-compute-algo": True, "--fp8-margin": True, "--fp8-interval": True,
    "--rampup-batch-size": True,
    "--lr-wsd-decay-style": True, "--lr-wsd-decay-samples": True, "--lr-wsd-decay-iters": True,
    "--decoupled-lr": True, "--decoupled-min-lr": True, "--start-weight-decay": True, "--end-weight-decay": True,
    "--weight-decay-incr-style": True, "--use-cpu-initialization": False, "--init-method-xavier-uniform": False,
    "--dataloader-type": True, "--num-dataset-builder-threads": True, "--reset-position-ids": False,
    "--reset-attention-mask": False, "--eod-mask-loss": False, "--no-mmap-bin-files": False,
    "--train-data-path": True, "--valid-data-path": True, "--test-data-path": True,
    "--log-validation-ppl-to-tensorboard": False, "--log-memory-to-tensorboard": False,
    "--log-world-size-to-tensorboard": False, "--log-progress": False, "--tensorboard-log-interval": True,
    "--tensorboard-queue-size": True, "--wandb-save-dir": True, "--logging-level": True,
    "--no-one-logger": False, "--one-logger-project": True, "--one-logger-run-name": True,
    "--use-pytorch-profiler": False, "--profile-step-start": True, "--profile-step-end": True,
    "--record-memory-history": False, "--memory-snapshot-path": True, "--log-straggler": False,
    "--empty-unused-memory-level": True, "--te-rng-tracker": False,
    "--moe-router-fusion": False, "--moe-use-legacy-grouped-gemm": False,
    "--moe-per-layer-logging": False, "--moe-router-pre-softmax": False, "--moe-router-enable-expert-bias": False,
    "--moe-router-bias-update-rate": True, "--moe-token-drop-policy": True, "--mtp-loss-scaling-factor": True,
    "--ddp-average-in-collective": False,
    # Recipe switches (Megatron-LM d98e8a64): --enable-experimental only unlocks features that
    # have flags of their own; --cross-entropy-fusion-impl native|te picks the fused
    # vocab-parallel cross-entropy kernel, whose time the compute profile's loss op measures.
    "--enable-experimental": False, "--cross-entropy-fusion-impl": True,
    # Start-up, checkpoint conversion and profiling switches NVIDIA's MoE examples pass
    # (examples/megatron_fsdp, moe/README.md at d98e8a64), and Megatron FSDP's own dtypes,
    # which act only with --use-megatron-fsdp (refused by workload_gen.core.unmodelled).
    "--init-model-with-meta-device": False, "--lr-warmup-init": True, "--moe-use-upcycling": False,
    "--moe-upcycling-granularity": True, "--profile-ranks": True,  # (--profile is our profile DB)
    "--fsdp-double-buffer": False, "--megatron-fsdp-main-params-dtype": True,
    "--megatron-fsdp-main-grads-dtype": True, "--megatron-fsdp-grad-comm-dtype": True,
    # --rope-type rope|yarn picks RoPE's frequencies (YaRN scaling), not the rotary kernel's work
    # (Megatron-LM d98e8a64 arguments.py; DeepSeek-V3 recipes pass yarn).
    "--rope-type": True,
    # --is-hybrid-model only selects Megatron's hybrid model class (pretrain_mamba.py); the
    # layers are what --hybrid-layer-pattern says. --use-fused-weighted-squared-relu moves the
    # router-probability multiply of the experts' outputs into their squared-ReLU kernel
    # (Megatron-LM d98e8a64 moe/experts.py): the same passes, costed with the activation and
    # the combine.
    "--is-hybrid-model": False, "--use-fused-weighted-squared-relu": False,
    # MoE options of Megatron-LM d98e8a64 that change nothing here: routing replay records the
    # routing for RL rollouts; uneven-input padding acts only when ranks route different token
    # counts (the workload's are equal); the paged stash's sizes are read only with
    # --moe-paged-stash (refused); the CUDA-graph expert padding is for inference.
    "--moe-enable-routing-replay": False, "--moe-hybridep-pad-uneven-dispatch-inputs": False,
    "--moe-paged-stash-buffer-size-factor-cpu": True, "--moe-paged-stash-buffer-size-factor-cuda": True,
    "--moe-paged-stash-page-size": True, "--moe-pad-experts-for-cuda-graph-inference": False,
    # Checkpointing, logging, data and process-group switches of Megatron-LM d98e8a64 that its own
    # functional tests pass (tests/functional_tests/test_cases/*/model_config.yaml): none changes
    # a shape or a collective of the training step. --rotary-interleaved reorders RoPE's pairs
    # (and turns the RoPE fusion off, as --no-rope-fusion, also ignored, does); FIM rewrites
    # samples, not their length.
    "--save-retain-interval": True, "--wandb-entity": True, "--verify-integrity": False,
    "--dist-ckpt-optim-fully-reshardable": False, "--no-ckpt-fully-parallel-save": False,
    "--disable-gloo-process-groups": False, "--eval-global-batch-size": True, "--rotary-interleaved": False,
    "--fim-data": False, "--fim-rate": True, "--fim-spm-rate": True,
})
MULTI_VALUE_IGNORED: frozenset[str] = frozenset({
    "--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--rampup-batch-size",
    "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--profile-ranks",  # nargs='+' (d98e8a64)
})
"""Ignored flags that take several values (Megatron's nargs='*'), e.g. --rampup-batch-size 16 16 5859375."""

_RATIOS = "spreads attention and MLP layers by ratio (deprecated in Megatron): give --hybrid-layer-pattern"
"""Why Megatron's deprecated hybrid layer ratios are refused (the pattern says the same, exactly)."""

NOT_MODELLED_MEGATRON_FLAGS: dict[str, tuple[bool, str | None, str]] = {
    # flag: (takes a value, the value that changes nothing (accepted and ignored) or None, what it would change)
    "--microbatch-group-size-per-virtual-pipeline-stage": (True, None, "changes the pipeline schedule"),
    "--fine-grained-activation-offloading": (False, None, "offloads chosen activations to the CPU"),
    "--offload-modules": (True, None, "offloads chosen activations to the CPU"),
    "--use-nccl-ub": (False, None, "registers NCCL user buffers (zero-copy collectives on fewer SMs)"),
    "--optimizer-cpu-offload": (False, None, "moves the optimizer step to the CPU"),
    "--num-distributed-optimizer-instances": (True, "1", "shards the optimizer over part of the data-parallel group"),
    "--distribute-saved-activations": (False, None, "splits recomputation checkpoints over TP (memory and communication)"),
    "--cpu-offloading": (False, None, "offloads activations to the CPU"),
    "--cpu-offloading-num-layers": (True, None, "offloads activations to the CPU"),
    "--disable-tp-comm-overlap-ag": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-overlap-rs": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-bulk-dgrad": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-bulk-wgrad": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-split-ag": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-split-rs": (False, None, "changes which TP communication overlaps"),
    "--use-torch-fsdp2": (False, None, "shards parameters with FSDP instead of the distributed optimizer"),
    "--data-parallel-sharding-strategy": (True, "no_shard", "shards parameters with FSDP"),
    "--hierarchical-context-parallel-sizes": (True, None, "splits CP communication hierarchically"),
    "--use-tp-pp-dp-mapping": (False, None, "changes which ranks form each group (placement on nodes)"),
    "--ddp-num-buckets": (True, None, "changes the gradient buckets"),
    "--use-sharp": (False, None, "runs the data-parallel reduction in the switch (SHARP)"),
    "--no-fp8-wgrad": (False, None, "runs the weight-gradient GEMMs in higher precision under FP8"),
    "--hybrid-attention-ratio": (True, "0.0", _RATIOS),
    "--hybrid-mlp-ratio": (True, "0.0", _RATIOS),
    "--mamba-training-ssm-states-dtype": (True, None, "changes the dtype of the SSD scan's chunk states"),
    # MoE options of Megatron-LM d98e8a64's TransformerConfig (each field is a flag of the same
    # name there, ArgumentGroupFactory) whose mechanism is not modelled
    "--moe-expert-rank-capacity-factor": (True, None, "caps each EP rank's tokens: HybridEP drops the excess and "
                                                      "skips its host sync (static buffers)"),
    "--moe-use-grouped-tensor": (False, None, "runs the experts through Transformer Engine's grouped-tensor kernels"),
    "--moe-single-grouped-weight": (False, None, "keeps the experts' weights as one grouped tensor"),
    "--moe-single-grouped-bias": (False, None, "keeps the experts' biases as one grouped tensor"),
    "--moe-latent-size": (True, None, "projects the tokens to a latent size around the experts (latent MoE)"),
    "--moe-shared-expert-gate": (False, None, "adds a gate to the shared expert"),
    "--moe-apply-probs-on-input": (False, None, "weights the experts' input by the router probability"),
    "--moe-router-topk-limited-devices": (True, None, "limits each token's experts to that many EP ranks (give "
                                                      "--moe-router-num-groups and --moe-router-group-topk)"),
    "--moe-router-force-biased": (True, None, "biases the router logits at random (the experts' balance)"),
    "--moe-router-quantile-balancing-ema": (True, "0.0", "changes the quantile-balancing router's bias"),
    "--moe-dispatch-fwd-dtype": (True, "bf16", "sends NCCL EP's dispatch in MXFP8"),
    "--moe-combine-bwd-dtype": (True, "bf16", "sends NCCL EP's combine gradient in MXFP8"),
    "--moe-paged-stash": (False, None, "stashes the experts' activations in paged buffers"),
    "--moe-permute-fusion-into-hybridep": (False, None, "fuses HybridEP's token rearrangement into its dispatch"),
    "--moe-hybridep-num-blocks-permute": (True, None, "changes the SMs HybridEP's permute holds"),
    "--moe-hybridep-num-blocks-unpermute": (True, None, "changes the SMs HybridEP's unpermute holds"),
    "--moe-hybridep-num-sms-preprocessing": (True, None, "changes the SMs HybridEP's preprocessing holds"),
    "--moe-ncclep-zero-copy": (False, None, "saves a copy of NCCL EP's received tokens"),
    "--moe-mlp-glu-interleave-size": (True, None, "interleaves the experts' GLU halves (a reordering copy "
                                                  "outside the fused path)"),
    "--moe-shared-expert-glu-interleave-size": (True, None, "interleaves the shared expert's GLU halves"),
    "--moe-token-dropping": (False, None, "drops and pads tokens per expert (Megatron: unsupported, keep off)"),
    # Megatron-LM d98e8a64 (model_parallel_config.py deterministic_mode; training/determinism.py)
    "--deterministic-mode": (False, None, "picks deterministic kernels and NCCL algorithms (slower execution)"),
    "--step-batch-size-schedule": (True, None, "changes the global batch during training"),
}
"""Real Megatron-LM flags that would change the simulated iteration but are not modelled:
refused with "not modelled: FLAG" (exit 2), unless given the value that changes nothing."""

IGNORED_DEST_PREFIX = "ignored_"


def ignored_dest(flag: str) -> str:
    """The parsed-value key of an ignored or refused flag (``--lr`` -> ``ignored_lr``)."""
    return IGNORED_DEST_PREFIX + flag.lstrip("-").replace("-", "_")


def ignored_flags_given(values: dict[str, object]) -> list[str]:
    """The accepted-and-ignored flags present in parsed ``values``, in table order (for the
    one note that lists them)."""
    flags = (*IGNORED_MEGATRON_FLAGS, *NOT_MODELLED_MEGATRON_FLAGS)
    return [f for f in flags if values.get(ignored_dest(f)) not in (None, False)]


ATTENTION_BACKENDS: dict[str, str] = {
    "flash": "flash", "fused": "flash", "auto": "flash", "unfused": "unfused", "local": "unfused",
}
"""Megatron's --attention-backend choices onto ours: what matters for time and memory is
whether the s x s scores go through memory (flash, fused and auto never materialise them)."""


def moe_layer_freq(text: str) -> int | tuple[int, ...]:
    """Megatron's --moe-layer-freq: the number of leading dense layers when the pattern is
    "k dense, then all MoE" (1 gives 0; ``([0]*3+[1]*58)`` gives 3: the field
    num_dense_layers, as before), else the per-layer pattern for moe_layer_pattern
    (``([0,1]*24)``, Llama 4 Maverick). An integer N > 1 (every N-th layer MoE) needs
    the layer count and is refused: write it as a list."""
    text = text.strip()
    if text.isdigit():
        if int(text) == 1:
            return 0
        raise ConfigError("moe_layer_freq", text, "only 1 or a list pattern like '([0]*3+[1]*58)' or '([0,1]*24)' "
                                                  "is supported")
    m = re.fullmatch(r"\(?\s*\[\s*0\s*\]\s*\*\s*(\d+)\s*\+\s*\[\s*1\s*\]\s*\*\s*(\d+)\s*\)?", text)
    if m:
        return int(m.group(1))
    return moe_layer_layout(parse_layer_pattern("moe_layer_freq", text))


def window_size(text: str) -> int | None:
    """Megatron's --window-size ``(left,right)`` (its tuple_type: "128,0" or "(128,0)") onto
    ModelConfig.window_size = left. A causal model looks only back: right must be 0; -1 is
    Megatron's "infinite", i.e. no window (None)."""
    parts = [p.strip() for p in text.strip().strip("()").split(",")]
    try:
        left, right = (int(parts[0]), 0) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except ValueError:
        raise ConfigError("window_size", text, "must be 'left,right' tokens like '128,0'") from None
    if len(parts) > 2 or right != 0:
        raise ConfigError("window_size", text, "must be 'left,0': a causal model attends only to earlier tokens")
    if left == -1:
        return None
    if left < 1:
        raise ConfigError("window_size", text, "left must be >= 1 (or -1: no window)")
    return left


def _every_nth_layer(name: str, layers: str, nth: str) -> Callable[[str], int]:
    """A Megatron frequency flag's converter: an integer N (every N-th layer is ``nth``). A
    list pattern is refused: only the integer form is modelled."""
    def convert(text: str) -> int:
        text = text.strip()
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(name, text, f"not modelled: a per-layer list pattern of {layers}; "
                                          f"give an integer N (every N-th layer {nth})")
        return int(text)
    return convert


MODEL_VALUE_CONVERTERS = {
    "window_size": window_size,
    # --window-attn-skip-freq N: every N-th layer keeps full attention
    "window_attn_skip_freq": _every_nth_layer("window_attn_skip_freq", "window layers", "full attention"),
    # --no-rope-freq N: every N-th layer skips RoPE (with chunked attention it attends globally)
    "no_rope_freq": _every_nth_layer("no_rope_freq", "NoPE layers", "without RoPE"),
}
"""Model flags whose Megatron spelling is parsed after argparse (flag_values.flags_to_dict),
so that a bad value is one ConfigError line like every other config problem."""
