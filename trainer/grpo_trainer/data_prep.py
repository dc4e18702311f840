"""JSONL prompt files -> the parquet files verl's RLHFDataset reads.

verl 0.9.1 filters over-long prompts inside its dataset only when asked, and otherwise fails mid-run
on the first batch that does not fit. Converting up front lets us report (or refuse) those rows
before any GPU time is spent, and lets a malformed file stop with its line number.

Input: one JSON object per line with
  prompt        str (becomes one user message) or a list of {"role", "content"} messages
  ground_truth  optional, handed to reward functions as `ground_truth` (alias: answer)
  data_source   optional, default "grpo"
  extra_info    optional object, kept
Output columns: data_source, prompt (chat messages), ability, reward_model {style, ground_truth},
extra_info {index, line, ...}: the shape verl's RLHFDataset and its reward managers expect.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from grpo_trainer.errors import DataPrepError

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]
TokenCounter = Callable[[Messages], int]
GENERATED_VAL_NAME = "val.generated.parquet"


@dataclass(frozen=True)
class Conversion:
    """One input file and the parquet file verl will read; source == target means used as is."""

    source: str
    target: str

    @property
    def needs_conversion(self) -> bool:
        return self.source != self.target


@dataclass(frozen=True)
class DataPlan:
    train: list[Conversion]
    val: list[Conversion]
    generate_val: str | None  # path of a one-row val file to write, when no val files were given

    @property
    def train_files(self) -> list[str]:
        return [c.target for c in self.train]

    @property
    def val_files(self) -> list[str]:
        files = [c.target for c in self.val]
        return [*files, self.generate_val] if self.generate_val else files


@dataclass
class PrepReport:
    source: str
    target: str
    kept: int = 0
    dropped_lines: list[int] = field(default_factory=list)


def _target_for(source: str, prepared_dir: str) -> str:
    path = Path(source)
    if path.suffix == ".parquet":
        return source
    if path.suffix == ".jsonl":
        return str(Path(prepared_dir) / f"{path.stem}.parquet")
    raise DataPrepError(f"{source}: unsupported data file type {path.suffix!r} (expected .jsonl or .parquet)")


def plan_data(train_files: list[str], val_files: list[str], prepared_dir: str) -> DataPlan:
    """Pure: decide which files get converted and where they go; nothing is read or written."""
    train = [Conversion(f, _target_for(f, prepared_dir)) for f in train_files]
    val = [Conversion(f, _target_for(f, prepared_dir)) for f in val_files]
    targets = [c.target for c in train + val if c.needs_conversion]
    if len(set(targets)) != len(targets):
        raise DataPrepError(f"two input files convert to the same parquet file in {prepared_dir}: {targets}")
    generated = None if val else str(Path(prepared_dir) / GENERATED_VAL_NAME)
    return DataPlan(train=train, val=val, generate_val=generated)


def _messages(prompt: Any, where: str) -> Messages:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataPrepError(f"{where}: 'prompt' is empty")
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt:
        for m in prompt:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise DataPrepError(f"{where}: each prompt message needs string 'role' and 'content', got {m!r}")
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise DataPrepError(f"{where}: 'prompt' must be a non-empty string or list of messages, got {prompt!r}")


def parse_row(line: str, where: str, index: int, lineno: int) -> dict[str, Any]:
    """One JSONL line -> one parquet row; raises DataPrepError naming `where` (file:line)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataPrepError(f"{where}: not valid JSON: {e.msg} (column {e.colno})") from e
    if not isinstance(obj, dict):
        raise DataPrepError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "prompt" not in obj:
        raise DataPrepError(f"{where}: missing 'prompt'")
    extra = obj.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise DataPrepError(f"{where}: 'extra_info' must be an object")
    ground_truth = obj.get("ground_truth", obj.get("answer", ""))
    return {
        "data_source": str(obj.get("data_source", "grpo")),
        "prompt": _messages(obj["prompt"], where),
        "ability": str(obj.get("ability", "general")),
        "reward_model": {"style": "rule", "ground_truth": "" if ground_truth is None else str(ground_truth)},
        "extra_info": {**extra, "index": index, "line": lineno},
    }


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield lineno, line


def convert_jsonl(
    source: str,
    target: str,
    count_tokens: TokenCounter,
    max_prompt_length: int,
    oversize: Literal["drop", "refuse"] = "drop",
) -> PrepReport:
    """Read `source`, write `target`; rows longer than max_prompt_length tokens are dropped or refused."""
    path = Path(source)
    if not path.is_file():
        raise DataPrepError(f"{source}: no such file")
    report = PrepReport(source=source, target=target)
    rows: list[dict[str, Any]] = []
    seen = 0
    for lineno, line in _numbered_lines(path):
        seen += 1
        where = f"{source}:{lineno}"
        row = parse_row(line, where, index=len(rows), lineno=lineno)
        n_tokens = count_tokens(row["prompt"])
        if n_tokens > max_prompt_length:
            if oversize == "refuse":
                raise DataPrepError(
                    f"{where}: prompt is {n_tokens} tokens, over data.max_prompt_length={max_prompt_length} "
                    "(grpo.data.oversize=refuse)"
                )
            report.dropped_lines.append(lineno)
            continue
        rows.append(row)
    if seen == 0:
        raise DataPrepError(f"{source}:1: file is empty (no JSON lines)")
    if report.dropped_lines:
        log.warning(
            "%s: dropped %d of %d prompts over data.max_prompt_length=%d tokens (lines %s)",
            source,
            len(report.dropped_lines),
            seen,
            max_prompt_length,
            _short(report.dropped_lines),
        )
    if not rows:
        raise DataPrepError(f"{source}: every prompt is over data.max_prompt_length={max_prompt_length} tokens")
    report.kept = len(rows)
    _write(rows, target)
    log.info("%s -> %s: %d prompts", source, target, report.kept)
    return report


def _short(lines: list[int], limit: int = 20) -> str:
    head = ", ".join(str(n) for n in lines[:limit])
    return head + (f", ... (+{len(lines) - limit})" if len(lines) > limit else "")


def _write(rows: list[dict[str, Any]], target: str) -> None:
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{target}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(target)  # a retried job never reads a half-written file


def write_generated_val(target: str) -> None:
    """verl 0.9.1 loads data.val_files even with validation off: one tiny row keeps that free."""
    row = parse_row(json.dumps({"prompt": "Say OK.", "data_source": "grpo_placeholder"}), target, 0, 1)
    _write([row], target)


def execute_plan(
    plan: DataPlan, count_tokens: TokenCounter, max_prompt_length: int, oversize: Literal["drop", "refuse"]
) -> list[PrepReport]:
    reports = [
        convert_jsonl(c.source, c.target, count_tokens, max_prompt_length, oversize)
        for c in plan.train + plan.val
        if c.needs_conversion
    ]
    for c in plan.train + plan.val:
        if not c.needs_conversion and not Path(c.source).is_file():
            raise DataPrepError(f"{c.source}: no such file")
    if plan.generate_val:
        write_generated_val(plan.generate_val)
    return reports


def chat_token_counter(tokenizer: Any) -> TokenCounter:
    """Count tokens the way verl's RLHFDataset does: the chat template with the generation prompt."""

    def count(messages: Messages) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        # transformers 5 returns a BatchEncoding here; 4.x returned the id list itself.
        if hasattr(ids, "keys") and "input_ids" in ids:
            ids = ids["input_ids"]
        return len(ids)

    return count
