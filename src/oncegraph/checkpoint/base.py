"""``BaseCheckpointSaver``: the protocol every oncegraph store implements."""

from oncegraph.storage.protocols import Checkpointer

BaseCheckpointSaver = Checkpointer

__all__ = ["BaseCheckpointSaver"]
