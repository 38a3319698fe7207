"""The replay core, which every other part builds on: a run, its journal and commits,
its waits and events, loading runs (recovery, quarantine of corrupt records) and keeping
them driven (re-driving after a storage failure, residency of idle runs)."""
