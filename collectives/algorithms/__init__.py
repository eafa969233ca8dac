"""Collective algorithms: each module registers builders in ``collectives.registry.ALGORITHMS``."""
