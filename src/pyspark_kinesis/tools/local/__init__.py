"""Local Kinesis-compatible servers (kinesis-local, kinesalite) for development, tests and the demo."""

from .server import LocalKinesis, ensure_installed

__all__ = ["LocalKinesis", "ensure_installed"]
