"""Messages to and from running workflows: signals, updates, queries, conditions, human
reviews, wake-up markers and the stream of terminal events."""
