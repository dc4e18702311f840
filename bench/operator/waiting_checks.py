"""CPU of the waiting check per job and period, warm, in this process: as the operator runs it (a timer task and the
job's lock per job) against one loop over the same jobs (what a sweep per namespace and period would cost at best).

N copies of the colocated example wait in Pending in the operator's JobCache; the namespace's claim list (every
claim Bound) and its warned pods (none) are the shared lookups' remembered answers, so no request is made: what is
measured is the check's own Python, which a sweep could save. Runs in the order timers, loop, loop, timers and
prints each run and the ratio of the means.

    PYTHONPATH=operator python bench/operator/waiting_checks.py --jobs 1000

Not a test: see RESULTS.md (seventh and eighth rounds) for what it was run to decide.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import yaml
from grpo_operator.reconcile import binding
from grpo_operator.runtime import kube
from grpo_operator.runtime.job_cache import JobCache

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "colocated-length.yaml"
NAMESPACE = "bench"
Key = tuple[str, str]


def waiting_jobs(count: int) -> list[Key]:
    """`count` Pending copies of the example in a fresh JobCache (the operator's, replaced)."""
    example = yaml.safe_load(EXAMPLE.read_text())
    kube.JOBS = JobCache()
    keys = []
    for i in range(count):
        job = copy.deepcopy(example)
        job["metadata"].update(namespace=NAMESPACE, name=f"job-{i}", uid=f"uid-{i}", generation=1,
                               resourceVersion=str(1000 + i))
        job["status"] = {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False", "reason": "Initializing", "message": "waiting for the Ray cluster"}]}
        kube.JOBS.remember(job)
        keys.append((NAMESPACE, f"job-{i}"))
    return keys


async def remember_lookups(keys: list[Key]) -> None:
    """Parse each job once (the check keeps that per version) and remember the namespace's shared answers."""
    claims: set[str] = set()
    for key in keys:
        seen = await binding._seen(*key)
        if seen is not None and seen.watched is not None:
            claims |= set(seen.watched.claims)
    bound = {claim: kube.ClaimFacts(("ReadWriteOnce",), "Bound", "") for claim in claims}
    for lookups, answer in ((binding._CLAIMS, bound), (binding._WARNED_PODS, {})):
        lookups.remember_seconds = float("inf")
        lookups._known[NAMESPACE] = (time.monotonic(), answer)


async def by_timers(keys: list[Key]) -> None:
    """Each job's check from a timer of its own, under its lock, as `binding.check_waiting_later` schedules it."""
    done = asyncio.Event()
    left = len(keys)

    def counted(key: Key) -> Callable[[], Awaitable[None]]:
        async def check() -> None:
            nonlocal left
            await binding._check_waiting_held(*key)
            left -= 1
            if left == 0:
                done.set()
        return check

    for key in keys:
        binding.WAITING_CHECKS.schedule(key, 0, counted(key))
    await done.wait()


async def by_loop(keys: list[Key]) -> None:
    """Every job's check, one after the other, from one task, without its lock."""
    for key in keys:
        await binding.check_waiting(*key)


async def measure(keys: list[Key]) -> dict[str, list[float]]:
    await remember_lookups(keys)
    found: dict[str, list[float]] = {"timers": [], "loop": []}
    for name in ("timers", "loop", "loop", "timers"):
        run = by_timers if name == "timers" else by_loop
        started = time.process_time()
        await run(keys)
        found[name].append((time.process_time() - started) / len(keys) * 1e6)
        binding.WAITING_CHECKS.cancel_all()  # each check scheduled its next one a period away
        await asyncio.sleep(0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    found = asyncio.run(measure(waiting_jobs(args.jobs)))
    for name, runs in found.items():
        print(f"{name:7s} CPU per check: " + ", ".join(f"{us:.1f} us" for us in runs))
    timers, loop = (sum(runs) / len(runs) for runs in (found["timers"], found["loop"]))
    print(f"timers/loop: {timers / loop:.2f}; at one check per job and 20-s period, 1000 waiting jobs cost "
          f"{timers * 1000 / 20 / 1000:.2f} ms/s by timers, {loop * 1000 / 20 / 1000:.2f} ms/s by a loop")


if __name__ == "__main__":
    main()
