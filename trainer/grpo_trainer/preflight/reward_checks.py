"""The user's reward function imported and called on a few real rows, in a child process with a time limit.

verl calls it as compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)
and wants a number (or a dict with a numeric "score"). A function that raises, hangs or returns
something else fails every step of a run; here it fails before a GPU is taken.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import numbers
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.preflight.verdict import Check
from grpo_trainer.reward.user_function import validate_reward_function

FIELD = "spec.reward.function"


def _call_all(path: str, name: str, calls: list[dict[str, Any]], conn: Any) -> None:
    """In the child: import the file and call the function once per row; send back results or the error."""
    try:
        spec = importlib.util.spec_from_file_location("grpo_preflight_reward", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, name)
        conn.send(("ok", [_describe(fn(**kwargs)) for kwargs in calls]))
    except BaseException as e:  # the user's code: report whatever it raised, with its last line
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == Path(path)]
        where = f"{path}:{frames[-1].lineno}" if frames else path
        conn.send(("error", f"{where}: {type(e).__name__}: {e}"))


def _describe(result: Any) -> tuple[bool, str]:
    """(acceptable to verl, short text) for one return value."""
    score = result.get("score") if isinstance(result, Mapping) else result
    ok = isinstance(score, numbers.Real)
    return ok, repr(result)[:80]


def reward_calls(rows: list[dict[str, Any]], reward_kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Keyword arguments as verl's reward loop builds them; the ground truth stands in for a response."""
    calls = []
    for row in rows:
        truth = (row.get("reward_model") or {}).get("ground_truth", "")
        calls.append({
            "data_source": row.get("data_source", "grpo"),
            "solution_str": str(truth or ""),
            "ground_truth": truth,
            "extra_info": row.get("extra_info") or {},
            **reward_kwargs,
        })
    return calls


def reward_function(path: str, name: str, calls: list[dict[str, Any]], timeout_s: float) -> Check:
    value = f"{Path(path).name}:{name}"
    try:
        validate_reward_function(path, name)
    except GrpoConfigError as e:
        return Check("reward.function", FIELD, False, str(e), value, "fix the reward file in its ConfigMap")
    if not calls:
        return Check("reward.function", FIELD, True, "imported; no rows to call it on", value)
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_call_all, args=(path, name, calls, child), daemon=True)
    proc.start()
    child.close()
    got = parent.recv() if parent.poll(timeout_s) else None
    proc.join(1)
    if proc.is_alive():
        proc.kill()
    if got is None:
        return Check("reward.function", FIELD, False,
                     f"{name}() did not return within {timeout_s:.0f} s on {len(calls)} row(s)", value,
                     "make the reward function fast (verl calls it for every response of every step)")
    status, payload = got
    if status == "error":
        return Check("reward.function", FIELD, False, f"{name}() raised on a real row: {payload}", value,
                     "fix the reward function; it is called with data_source, solution_str, ground_truth, "
                     "extra_info as keywords")
    bad = [text for ok, text in payload if not ok]
    if bad:
        return Check("reward.function", FIELD, False,
                     f"{name}() returned {bad[0]}; verl needs a number or a dict with a numeric 'score'", value,
                     "return a float (or {'score': float, ...})")
    return Check("reward.function", FIELD, True,
                 f"called on {len(payload)} row(s): {', '.join(text for _, text in payload[:3])}", value)
