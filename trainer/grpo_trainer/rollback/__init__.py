"""Guardrail rollbacks on the checkpoint volume: pinned steps, the step a rollback resumes from, and the
start of a rolled-back attempt (docs/guardrails.md, "What act does")."""
