"""Prebuilt graphs (the ``ReactAgent``) and the chat-model port they call (``models``)."""
