"""oncegraph: agent graphs that survive crashes without doing anything twice."""
