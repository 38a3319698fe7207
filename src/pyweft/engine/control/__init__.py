"""The engine's shared core and what it does to runs from outside: creation, cancel /
suspend / resume / fail, lifecycle, maintenance (fork, purge, retention)."""
