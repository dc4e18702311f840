#!/bin/bash
# Device: the last wheel chunk, setup, then bg.sh's runs under setsid; waits for them up to the call's 575 s.
# bash bench/gpu/device/start.sh LAST_CHUNK_DIR SHAPE FIRST ORDER1 CAP1 [ORDER2 CAP2 ...]
LAST=$1
shift
export PYTHONUNBUFFERED=1
export PATH=/tmp/gpuw/site/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
cp "$LAST"/* /tmp/chunks/ && python3 bench/gpu/session.py setup --chunks /tmp/chunks --site /tmp/gpuw/site --out "$OUT" || exit 1
echo "setup done at ${SECONDS}s"
rm -f /tmp/gpuw/done
setsid nohup bash bench/gpu/device/bg.sh "$@" > /tmp/gpuw/bg.log 2>&1 < /dev/null &
sleep 2
bash bench/gpu/device/poll.sh $((575 - SECONDS))
