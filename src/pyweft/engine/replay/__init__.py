"""The replay core: a run, its journal and commits, its waits, and what keeps runs
driven (recovery, re-driving after a storage failure, residency of idle runs)."""
