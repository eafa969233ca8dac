"""The ground floor: the vocabulary every stage shares, and nothing that builds a workload.

Every package may import from here; nothing here imports a stage (workload_gen's own stage
modules included; pyproject.toml's import-linter contracts check it). The modules, by what
they hold:

- **the three inputs**: ``model_config`` (ModelConfig) with ``model_presets``;
  ``parallel_config`` (ParallelConfig, the layout and training settings); ``system``
  (SystemConfig, the cluster) with ``gpu_specs`` (GPUSpec, published figures per GPU);
  ``placement`` (which rank sits on which node and NVLink domain).
- **formulas of the model** that several stages need: ``params`` (parameter counts),
  ``flops`` (Narayanan's model FLOPs per iteration), ``optimizer_state`` (what Adam keeps
  per parameter and the bytes its step moves).
- **records exchanged between stages**: ``record`` (the ``@record`` decorator), ``records``
  (Workload, ComputeOp, CollectiveOp, ...), ``run_result`` (RunResult and its parts),
  ``metrics`` (tokens/s, TFLOP/s per GPU, MFU from a result).
- **plumbing**: ``errors`` (the one-line error types), ``units``, ``limits`` (explicit input
  bounds checked up front), ``registry`` (name -> implementation tables), ``lazy`` (a
  package's lazy attributes), ``yaml_file`` (reading a YAML mapping with one-line errors),
  ``progress`` (the TTY-aware progress bar of long jobs).

Importing this package imports none of them.
"""
