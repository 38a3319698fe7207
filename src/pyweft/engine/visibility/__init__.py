"""Reading runs for people and tools: describe, list and filter, history, results."""
