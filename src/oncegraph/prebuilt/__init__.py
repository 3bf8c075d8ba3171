"""Prebuilt graphs (the ``ReactAgent``), the chat-model port they call (``models``), and
the agent's parts: approval before tools (``approval``), structured output
(``structured``) and the model call with retries and fallbacks (``model_call``)."""
