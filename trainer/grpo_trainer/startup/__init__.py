"""The start-up path: what brings a grpo-train run to its first step fast.

Ray, the TaskRunner, TransferQueue, vLLM's rollout servers and model inspection, and verl's agent-loop
workers are started earlier than verl 0.9.1 would start them, each overlapping the others' imports, and
handed to verl as its own; each falls back to verl's own start when it cannot be vouched for.
"""
