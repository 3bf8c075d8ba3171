"""LangGraph docs, "Functional API": a workflow with a task and a human review; on
resume the task is not run again (its result is served from its record)."""

import time
import uuid

from oncegraph.func import entrypoint, task
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.types import Command, interrupt

calls = []


@task
def compose_essay(topic: str) -> str:
    """Write an essay about the given topic."""
    calls.append(topic)
    time.sleep(0.01)  # Simulate slow operation
    return f"An essay about {topic}"


@entrypoint(checkpointer=InMemoryCheckpointer())
def review_workflow(topic: str) -> dict:
    """Manages the workflow for generating and reviewing an essay."""
    essay_future = compose_essay(topic)
    essay = essay_future.result()
    human_review = interrupt({"question": "Please provide a review", "essay": essay})
    return {"essay": essay, "review": human_review}


config = {"configurable": {"thread_id": str(uuid.uuid4())}}
for item in review_workflow.stream("cats", config):
    print(item)

human_review = "This essay is great."
for item in review_workflow.stream(Command(resume=human_review), config):
    print(item)

# oncegraph's own checks
assert calls == ["cats"]
assert review_workflow.get_state(config).values == {
    "essay": "An essay about cats",
    "review": "This essay is great.",
}
(record,) = review_workflow.effects(thread_id=config["configurable"]["thread_id"])
assert record.effect_type == "compose_essay"
assert str(record.status) == "completed"
