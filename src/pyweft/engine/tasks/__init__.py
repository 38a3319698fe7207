"""Activity task queues: task records, the engine's dispatch, claims, worker records.

See :mod:`.records` for the stored layout, :mod:`.dispatch` for the engine's side,
:mod:`.claims` for a worker's store operations and :mod:`.workers` for liveness.
"""
