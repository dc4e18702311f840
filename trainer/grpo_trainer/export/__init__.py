"""FSDP checkpoint -> HuggingFace safetensors export (``grpo-export``)."""
