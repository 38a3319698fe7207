"""Worker processes that serve activity task queues (see ``docs/guides/workers.md``)."""

from pyweft.worker.remote import RemoteWorker
from pyweft.worker.worker import Worker

__all__ = ["RemoteWorker", "Worker"]
