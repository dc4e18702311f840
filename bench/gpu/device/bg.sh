#!/bin/bash
# Device, started by start.sh under setsid: throughput runs one after the other, each with its own wall cap.
# A process in its own session outlives the call that started it (the device README), so a run is not held
# to one call's 600 s; poll.sh brings back what the runs wrote.
# bash bench/gpu/device/bg.sh SHAPE FIRST ORDER1 CAP1 [ORDER2 CAP2 ...]
SHAPE=$1 FIRST=$2
shift 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/gpuw/site:$PWD/trainer:$PWD/operator:$PWD/bench/gpu
export PATH=/tmp/gpuw/site/bin:$PATH
mkdir -p /tmp/gpuw/out
while [ $# -ge 2 ]; do
  ORDER=$1 CAP=$2
  shift 2
  bash bench/gpu/device/cleanup.sh
  echo "start $ORDER cap $CAP at $(date +%T)"
  timeout -k 5 $((CAP + 120)) python3 bench/gpu/throughput.py call --shape "$SHAPE" --order "$ORDER" \
      --first "$FIRST" --wall-cap "$CAP" --out /tmp/gpuw/out
  echo "$ORDER rc=$? at $(date +%T)"
done
bash bench/gpu/device/cleanup.sh
touch /tmp/gpuw/done
