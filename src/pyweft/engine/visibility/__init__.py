"""Reading runs for people and tools: describe, list and filter, history, results, and
the whole-store integrity check behind ``pyweft doctor``."""
