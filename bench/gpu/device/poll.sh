#!/bin/bash
# Device: wait for bg.sh's runs up to SECS (or until they are all done), then bring back what they wrote so far.
# bash bench/gpu/device/poll.sh SECS
SECS=$1
while [ $SECONDS -lt "$SECS" ] && [ ! -e /tmp/gpuw/done ]; do sleep 5; done
grep -E "^start|rc=|step:|prepared|Error|OutOfMemory" /tmp/gpuw/bg.log | cut -c1-200 | tail -40
nvidia-smi --query-gpu=memory.used,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
cp /tmp/gpuw/out/* "$OUT"/ 2>/dev/null
gzip -c /tmp/gpuw/bg.log > "$OUT"/bg.log.gz
ls -la "$OUT"
if [ -e /tmp/gpuw/done ]; then echo ALL-DONE; fi
