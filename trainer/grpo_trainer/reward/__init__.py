"""Reward extensions loaded by verl 0.9.1's reward loop."""
