#!/bin/bash
# (each call: a throughput pair or the log-prob micro-benchmark, within one call; see bg.sh for runs past it)
# bash bench/gpu/device/call.sh SETUP MICRO ORDER FIRST END SHAPE  (device only; END: seconds this call may take in all)
SETUP=$1 MICRO=$2 ORDER=$3 FIRST=$4 END=$5 SHAPE=${6:-qwen2.5-0.5b}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/gpuw/site:$PWD/trainer:$PWD/operator:$PWD/bench/gpu
export PATH=/tmp/gpuw/site/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
if [ "$SETUP" = 1 ]; then
  cp .whl-14/* /tmp/chunks/ && python3 bench/gpu/session.py setup --chunks /tmp/chunks --site /tmp/gpuw/site --out $OUT || exit 1
  echo "setup done at ${SECONDS}s"
fi
bash bench/gpu/device/cleanup.sh
if [ "$MICRO" = 1 ]; then
  timeout -k 5 150 python3 bench/gpu/logprobs.py --out $OUT/logprobs
  bash bench/gpu/device/cleanup.sh
fi
if [ "$ORDER" != none ]; then
  timeout -k 5 $((END - SECONDS)) python3 bench/gpu/throughput.py call --shape $SHAPE --order $ORDER --first $FIRST \
      --wall-cap 590 --deadline $((END - 15 - SECONDS)) --out $OUT
  echo "throughput rc=$? at ${SECONDS}s"
  bash bench/gpu/device/cleanup.sh
fi
