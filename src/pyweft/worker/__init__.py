"""Worker processes that serve activity task queues (see ``docs/guides/workers.md``)."""

from pyweft.worker.worker import Worker

__all__ = ["Worker"]
