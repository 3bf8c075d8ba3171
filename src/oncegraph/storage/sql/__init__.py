"""SQL storage: one schema (:mod:`.schema`), shared statements, thin dialect modules."""
