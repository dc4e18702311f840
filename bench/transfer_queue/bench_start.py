"""TransferQueue's start by grpo-train's starter actor (grpo_trainer.startup.transfer_queue_start): its controller and
storage units in one round, against `transfer_queue.init`'s two rounds, side by side on one local Ray.

Each repetition runs both, in alternating order (ABBA), each from a fresh starter actor: the time from asking
the starter to start until it reports TransferQueue up (the starter's own process start and import of
`transfer_queue` included, the same for both), then everything is stopped before the next one. Prints each
run, the means and the ratio one round / two rounds.

  python bench/transfer_queue/bench_start.py                  # verl's default: 8 storage units; 3 pairs
  python bench/transfer_queue/bench_start.py --units 2 --pairs 1

This machine's figures are in bench/transfer_queue/RESULTS.md; the one that matters is the H200 run's
(bench/gpu/RESULTS.md), where these processes start beside verl's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[2] / "trainer"


def settings(units: int) -> dict:
    """verl 0.9.1's transfer_queue section (config/transfer_queue/transfer_queue.yaml) as its TaskRunner passes
    it, with the number of storage units given."""
    return {
        "enable": True,
        "controller": {"sampler": "SequentialSampler", "polling_mode": False},
        "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": units}},
    }


def one_start(units: int, one_round: bool) -> float:
    import ray
    from grpo_trainer.startup import transfer_queue_start

    started = time.monotonic()
    transfer_queue_start.start_transfer_queue(settings(units), {"num_cpus": 0}, one_round)
    outcome = ray.get(transfer_queue_start._starter["start"], timeout=600)
    took = time.monotonic() - started
    transfer_queue_start.stop_transfer_queue()
    if outcome != "started":
        raise SystemExit(f"the starter answered {outcome!r}, not 'started'")
    time.sleep(2)  # the killed actors' processes exit before the next start
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--units", type=int, default=8, help="storage units (verl's default: 8)")
    p.add_argument("--pairs", type=int, default=3, help="ABBA pairs of runs")
    args = p.parse_args(argv)
    os.environ["RAY_ADDRESS"] = "local"
    # grpo_trainer here and in the starter's process, which Ray starts with this environment
    sys.path.insert(0, str(TRAINER))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TRAINER), os.environ.get("PYTHONPATH")]))
    import ray

    # each storage unit and the controller hold one CPU for their life
    ray.init(num_cpus=args.units + 2, include_dashboard=False, log_to_driver=False)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for i in range(args.pairs):
            for one_round in (True, False) if i % 2 == 0 else (False, True):
                took = one_start(args.units, one_round)
                times[one_round].append(took)
                print(f"pair {i + 1}: {'one round ' if one_round else 'two rounds'} {took:6.2f} s", flush=True)
    finally:
        ray.shutdown()
    one, two = statistics.mean(times[True]), statistics.mean(times[False])
    print(f"\n{args.units} storage units, {args.pairs} pairs, {os.cpu_count()} CPUs")
    print(f"one round  (grpo-train):           mean {one:6.2f} s  ({', '.join(f'{t:.2f}' for t in times[True])})")
    print(f"two rounds (transfer_queue.init):  mean {two:6.2f} s  ({', '.join(f'{t:.2f}' for t in times[False])})")
    print(f"ratio one round / two rounds: {one / two:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
