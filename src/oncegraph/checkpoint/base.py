"""``BaseCheckpointSaver``: the protocol every oncegraph store implements (each also has
LangGraph's reading API, ``get_tuple`` / ``list``, :mod:`oncegraph.storage.saver_api`);
``CheckpointTuple``: what that API gives (:mod:`oncegraph.checkpoint.tuples`)."""

from oncegraph.checkpoint.tuples import CheckpointTuple
from oncegraph.storage.protocols import Checkpointer

BaseCheckpointSaver = Checkpointer

__all__ = ["BaseCheckpointSaver", "CheckpointTuple"]
