"""Runs that start runs: child workflows, fan-out (``ctx.all``/``ctx.race``) and sagas."""
