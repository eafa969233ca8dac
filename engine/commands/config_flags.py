"""The model and training flags every config-taking command shares: -c, --model, our short
flags and Megatron-LM's own, built from the tables in workload_gen/megatron_flags.py.

The parser is the command's business; what the values mean is the library's
(:func:`workload_gen.flag_values.configs_from_flags`). Every flag defaults to None (not
given), so a flag can be told from a default and layered over the YAML file.
"""
from __future__ import annotations

import argparse
import sys

from workload_gen.config_loading import DEFAULT_MODEL, section_of
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.field_docs import field_help
from workload_gen.flag_values import configs_from_flags
from workload_gen.megatron_flags import (
    ATTENTION_BACKENDS,
    IGNORED_MEGATRON_FLAGS,
    MODEL_SWITCHES,
    MODEL_VALUE_FLAGS,
    MULTI_VALUE_IGNORED,
    NOT_MODELLED_MEGATRON_FLAGS,
    PAR_BOOL_FLAGS,
    PAR_LIST_FLAGS,
    PAR_SWITCHES,
    PAR_VALUE_FLAGS,
    SWITCH_HELP,
    ignored_dest,
)


class _NotModelled(argparse.Action):
    """A Megatron-LM flag the simulator does not model: one-line usage error (exit 2), or,
    given its no-op value, recorded as ignored."""

    def __init__(self, option_strings, dest, reason: str = "", noop: str | None = None, **kwargs) -> None:
        self.reason = reason
        self.noop = noop
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.noop is not None and values == self.noop:
            setattr(namespace, self.dest, values)
            return
        shown = option_string if values in (None, []) else f"{option_string} {values}"
        parser.error(f"not modelled: {shown} ({self.reason}; the simulator has no model of it)")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``-c``, ``--model``, the short flags and their Megatron-LM aliases to ``parser``.

    Every flag defaults to None (not given), so :func:`configs_from_args` can tell a
    flag from a default and layer the flags over the YAML file.
    """
    g = parser.add_argument_group("model and training config (YAML, short flags or Megatron-LM flags)")
    g.add_argument("-c", "--config", metavar="YAML", help="run file with model:/parallel:/training: sections")
    g.add_argument("--model", metavar="PRESET", help=f"model preset ({', '.join(PRESETS)}); default {DEFAULT_MODEL}")
    for flags, field, typ in MODEL_VALUE_FLAGS:
        g.add_argument(*flags, dest=f"m_{field}", type=typ, metavar="N" if typ is int else "X" if typ is float else "NAME",
                       help=field_help(ModelConfig, field, "model"))
    for flag, field, value in MODEL_SWITCHES:
        g.add_argument(flag, dest=f"m_{field}", action="store_const", const=value,
                       help=f"sets {field} to {value}: " + field_help(ModelConfig, field, "model"))
    g.add_argument("--group-query-attention", dest="m_group_query_attention", action="store_true", default=None,
                   help="Megatron GQA switch (num_query_groups defaults to 1 with it)")
    g.add_argument("--moe-layer-freq", dest="m_moe_layer_freq", metavar="FREQ",
                   help="Megatron MoE layer pattern: 1, or '([0]*k+[1]*n)' for k leading dense layers")
    for flags, field, typ, choices in PAR_VALUE_FLAGS:
        g.add_argument(*flags, dest=f"p_{field}", type=typ, choices=choices,
                       metavar=("N" if typ is int else "X" if typ is float else "NAME") if choices is None else None,
                       help=field_help(ParallelConfig, field, section_of(field)))
    for flags, field in PAR_BOOL_FLAGS:
        g.add_argument(flags[0], dest=f"p_{field}", action=argparse.BooleanOptionalAction, default=None,
                       help=field_help(ParallelConfig, field, section_of(field)))
        if len(flags) > 1:
            g.add_argument(*flags[1:], dest=f"p_{field}", action="store_const", const=True, help=argparse.SUPPRESS)
    for flags, field, choices in PAR_LIST_FLAGS:
        g.add_argument(*flags, dest=f"p_{field}", nargs="+", choices=choices,
                       metavar="MODULE" if choices else "NAME",
                       help=field_help(ParallelConfig, field, section_of(field)))
    for flag, field, value in PAR_SWITCHES:
        g.add_argument(flag, dest=f"p_{field}", action="store_const", const=value,
                       help=SWITCH_HELP.get(flag) or
                       f"sets {field} to {value}: " + field_help(ParallelConfig, field, section_of(field)))
    g.add_argument("--bf16", dest="p_dtype", action="store_const", const="bf16", help="dtype bf16 (Megatron)")
    g.add_argument("--fp16", dest="p_dtype", action="store_const", const="fp16", help="dtype fp16 (Megatron)")
    g.add_argument("--fp8-format", dest="p_fp8", metavar="FORMAT",
                   help="Megatron FP8 training (dtype fp8); the format (e4m3, hybrid) does not change the timing")
    g.add_argument("--fp4-format", dest="p_fp4", metavar="FORMAT", choices=("e2m1",),
                   help="Megatron FP4 training (dtype fp4, recipe --fp4-recipe nvfp4): e2m1, the only format "
                        "Megatron accepts")
    g.add_argument("--attention-backend", dest="p_attention_backend", type=_attention_backend,
                   metavar="flash|fused|auto|unfused|local",
                   help="Megatron's attention implementation: flash, fused and auto never materialise the "
                        "scores (attention_backend flash); unfused and local do (unfused)")
    g.add_argument("--recompute-activations", dest="p_recompute", action="store_const", const="selective",
                   help=argparse.SUPPRESS)
    g.add_argument("--hf-config", dest="hf_config", metavar="CONFIG_JSON",
                   help="model from a Hugging Face config.json (Llama 2/3, Mistral, Mixtral, Qwen2/3 dense and "
                        "MoE, DeepSeek-V2/V3, GPT-2, GPT-NeoX); instead of --model, model flags override it")
    ig = parser.add_argument_group("ignored Megatron-LM flags")
    for flag, takes_value in IGNORED_MEGATRON_FLAGS.items():
        dest = ignored_dest(flag)
        if flag in MULTI_VALUE_IGNORED:
            ig.add_argument(flag, dest=dest, nargs="*", help=argparse.SUPPRESS)
        elif takes_value:
            ig.add_argument(flag, dest=dest, help=argparse.SUPPRESS)
        else:
            ig.add_argument(flag, dest=dest, action="store_true", default=None, help=argparse.SUPPRESS)
    for flag, (takes_value, noop, reason) in NOT_MODELLED_MEGATRON_FLAGS.items():
        dest = ignored_dest(flag)
        ig.add_argument(flag, dest=dest, action=_NotModelled, nargs=None if takes_value else 0,
                        reason=reason, noop=noop, help=argparse.SUPPRESS)


def _attention_backend(text: str) -> str:
    """Megatron's --attention-backend value onto ours (workload_gen.megatron_flags.ATTENTION_BACKENDS)."""
    if text not in ATTENTION_BACKENDS:
        raise argparse.ArgumentTypeError(f"invalid choice {text!r} ({', '.join(ATTENTION_BACKENDS)})")
    return ATTENTION_BACKENDS[text]


def configs_from_args(args: argparse.Namespace) -> tuple[ModelConfig, ParallelConfig]:
    """Configs from a namespace filled by a parser that got :func:`add_config_arguments`;
    the notes (ignored flags, Megatron's warnings) go to stderr, one line each: ``note:``
    lines are informational and -q silences them, ``warning:`` lines never are."""
    model, par, notes = configs_from_flags(vars(args))
    quiet = getattr(args, "quiet", False)
    for line in notes:
        if not (quiet and line.startswith("note:")):
            print(line, file=sys.stderr)
    return model, par
