"""Schedules: recurring runs from cron expressions or intervals (see docs/guides/schedules.md)."""
