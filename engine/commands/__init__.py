"""The roof: the ten commands, and only the commands.

Each module turns a command line into calls of the library and the library's answers into
files, lines and exit codes: ``gen_workload`` (gen-workload), ``compute_profile``
(compute-profile), ``expand_collective`` (expand-collective), ``run`` (run-analytical and
run-ns3), ``diff`` (diff-trace, diff-workload), ``sweep`` (sweep, search) and ``serve_web`` (serve-web,
the what-if page over engine.web). Their shared
parts: ``parser`` (the one-line-error parser and the exit-code wrapper), ``vocab`` (the
flags every command spells the same way) and ``config_flags`` (the model and training flags,
Megatron-LM's among them).

Nothing outside this package imports it (pyproject.toml's import-linter contracts); argparse
and printing to the terminal live here and nowhere else in the library.
"""
