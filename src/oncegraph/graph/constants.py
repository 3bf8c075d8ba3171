"""The virtual entry and exit nodes."""

START = "__start__"
END = "__end__"
