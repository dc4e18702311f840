"""Fail fast on a broken user reward function, before Ray or a GPU is touched.

verl imports the file only when its reward loop starts, minutes into a run, and wraps any error in a
RuntimeError without the line. We import it the same way at start-up and report file, line and error.
"""

from __future__ import annotations

import importlib.util
import inspect
import traceback
from pathlib import Path

from grpo_trainer.errors import GrpoConfigError


def _line_in(path: Path, exc: BaseException) -> int | None:
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return exc.lineno
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return lines[-1] if lines else None


def validate_reward_function(path: str, name: str) -> None:
    """Import `path` and check it defines a callable `name`; raise GrpoConfigError naming file and line."""
    file = Path(path)
    if not file.is_file():
        raise GrpoConfigError(f"reward function file {path} does not exist (reward.custom_reward_function.path)")
    spec = importlib.util.spec_from_file_location(f"grpo_user_reward_{abs(hash(str(file.resolve())))}", file)
    if spec is None or spec.loader is None:
        raise GrpoConfigError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # any error while importing user code is the user's to see, with its line
        line = _line_in(file.resolve(), e) or _line_in(file, e)
        where = f"{path}:{line}" if line else path
        raise GrpoConfigError(f"{where}: reward function file failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, name, None)
    if fn is None:
        defined = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise GrpoConfigError(
            f"{path}: no function {name!r} (reward.custom_reward_function.name); callables defined: {defined}"
        )
    if not callable(fn):
        raise GrpoConfigError(f"{path}: {name!r} is a {type(fn).__name__}, not a function")
    params = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    # verl calls compute_score(data_source=, solution_str=, ground_truth=, extra_info=) by keyword.
    missing = [p for p in ("data_source", "solution_str", "ground_truth") if p not in params]
    if missing and not takes_kwargs:
        raise GrpoConfigError(
            f"{path}: {name}() must accept keyword arguments data_source, solution_str, ground_truth "
            f"(and extra_info); missing {missing}"
        )
