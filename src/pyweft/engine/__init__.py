"""The engine: runs, steps, commits, recovery and inspection."""
