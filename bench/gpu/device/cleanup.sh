#!/bin/bash
# between steps of a device call: no Ray or GPU process left over
ray stop --force >/dev/null 2>&1 || true
pkill -9 -f "vllm|raylet|gcs_server" >/dev/null 2>&1 || true
sleep 1
nvidia-smi --query-gpu=memory.used,clocks.sm,temperature.gpu,power.draw --format=csv,noheader || true
