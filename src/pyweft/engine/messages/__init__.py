"""Messages to and from runs: signals, updates, queries, conditions, human reviews,
wake-up markers, and the event stream (run events, terminal events)."""
