from cp_fixtures import tiny_workload  # noqa: F401  (fixture)
