"""The run loop: pure engine, async driver, sync facade, context and fault injection."""
