"""The prompt files as verl will read them: schema, over-long prompts under the oversize policy, enough rows.

JSONL files go through the trainer's own conversion (data_prep.py): every row is parsed with the same
code, and over-long prompts are dropped or refused by `data.oversize`. Parquet files reach verl as
they are, so an over-long prompt there stops the run (verl's `data.truncation: error`) unless verl
is told to filter them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_trainer.data_prep import DataPrepError, Messages, TokenCounter, parse_row
from grpo_trainer.preflight.verdict import Check

FILES_FIELD = "spec.data.trainFiles"
LENGTH_FIELD = "spec.data.maxPromptLength"


@dataclass(frozen=True)
class PromptRules:
    """What decides a prompt's fate: verl's keys as the trainer will run them."""

    prompt_key: str
    max_prompt_length: int
    oversize: str  # drop | refuse (JSONL only)
    parquet_filtered: bool  # data.filter_overlong_prompts, or a truncation other than "error"


@dataclass
class FileScan:
    rows: int = 0
    over: int = 0
    longest: int = 0
    first_over: str = ""


def _jsonl_prompts(path: Path) -> Iterator[tuple[str, Messages]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                where = f"{path}:{lineno}"
                yield where, parse_row(line, where, index=0, lineno=lineno)["prompt"]


def _parquet_prompts(path: Path, prompt_key: str) -> Iterator[tuple[str, Messages]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if prompt_key not in table.column_names:
        raise DataPrepError(f"{path}: no column {prompt_key!r} (columns: {table.column_names})")
    for index, value in enumerate(table.column(prompt_key).to_pylist()):
        where = f"{path} row {index}"
        if isinstance(value, str):
            yield where, [{"role": "user", "content": value}]
        elif isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
            yield where, value
        else:
            raise DataPrepError(f"{where}: {prompt_key!r} must be a string or a list of chat messages")


def scan(path: Path, rules: PromptRules, count_tokens: TokenCounter) -> FileScan:
    prompts = _parquet_prompts(path, rules.prompt_key) if path.suffix == ".parquet" else _jsonl_prompts(path)
    result = FileScan()
    for where, messages in prompts:
        result.rows += 1
        tokens = count_tokens(messages)
        result.longest = max(result.longest, tokens)
        if tokens > rules.max_prompt_length:
            result.over += 1
            result.first_over = result.first_over or f"{where} ({tokens} tokens)"
    return result


def train_file(path: str, rules: PromptRules, count_tokens: TokenCounter) -> tuple[Check, int]:
    """(check, prompts the run will keep) for one training file."""
    name = f"data.file:{Path(path).name}"
    file = Path(path)
    if not file.is_file():
        return Check(name, FILES_FIELD, False, f"{path} does not exist", path,
                     "fix the path (relative to data.claimName's root) or put the file on the claim"), 0
    if file.suffix == ".jsonl" and rules.prompt_key != "prompt":
        return Check(name, "spec.data.promptKey", False,
                     f"JSONL rows are read by their 'prompt' field, but verl is told to read {rules.prompt_key!r}",
                     rules.prompt_key, "remove data.promptKey, or convert the file to parquet with that column"), 0
    try:
        result = scan(file, rules, count_tokens)
    except (DataPrepError, OSError, ValueError) as e:
        return Check(name, FILES_FIELD, False, str(e), path, "fix the file's rows (see data_prep.py for the shape)"), 0
    if result.rows == 0:
        return Check(name, FILES_FIELD, False, f"{path} has no rows", path, "put prompts in the file"), 0
    return _oversize_verdict(name, path, file.suffix, result, rules)


def _oversize_verdict(name: str, path: str, suffix: str, result: FileScan, rules: PromptRules) -> tuple[Check, int]:
    limit = rules.max_prompt_length
    value = f"{result.over} of {result.rows} prompts over {limit} tokens (longest {result.longest})"
    kept = result.rows - result.over
    if result.over == 0:
        return Check(name, LENGTH_FIELD, True, f"{result.rows} prompts, longest {result.longest} tokens", value), kept
    fix = f"raise data.maxPromptLength to at least {result.longest}, or shorten those prompts"
    if suffix == ".parquet" and not rules.parquet_filtered:
        return Check(name, LENGTH_FIELD, False,
                     f"{value}, first {result.first_over}: verl stops the run at the first such prompt "
                     "(data.truncation=error)",
                     value, fix + "; or set spec.verl data.filter_overlong_prompts: true"), 0
    if suffix == ".jsonl" and rules.oversize == "refuse":
        return Check(name, LENGTH_FIELD, False, f"{value}, first {result.first_over}, and data.oversize=refuse",
                     value, fix + "; or set data.oversize=drop"), 0
    if kept == 0:
        return Check(name, LENGTH_FIELD, False, f"every prompt is over {limit} tokens", value, fix), 0
    return Check(name, LENGTH_FIELD, True, f"{value}: they will be dropped", value), kept


def enough_prompts(kept: int, train_batch_size: int) -> Check:
    """verl's training dataloader drops the last incomplete batch: fewer prompts than one batch train nothing."""
    value = f"{kept} prompts kept, data.trainBatchSize {train_batch_size}"
    if kept < train_batch_size:
        return Check("data.enough_prompts", "spec.data.trainBatchSize", False,
                     f"{kept} usable prompts make no full batch of {train_batch_size}: verl drops the incomplete "
                     "last batch, so not a single step would run", value,
                     f"lower data.trainBatchSize to at most {kept}, or add prompts")
    return Check("data.enough_prompts", "spec.data.trainBatchSize", True,
                 f"{kept // train_batch_size} full batch(es) per epoch", value)


def val_file(path: str) -> Check:
    name = f"data.val:{Path(path).name}"
    if not Path(path).is_file():
        return Check(name, "spec.data.valFiles", False, f"{path} does not exist", path,
                     "fix the path or remove it from data.valFiles")
    return Check(name, "spec.data.valFiles", True, f"{path} exists", path)


def sample_rows(path: str, count: int) -> list[dict[str, Any]]:
    """A few rows shaped as verl hands them to reward functions (for the reward check)."""
    file = Path(path)
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(file).slice(0, count).to_pylist()
    rows = []
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                rows.append(parse_row(line, f"{path}:{lineno}", index=len(rows), lineno=lineno))
            if len(rows) >= count:
                break
    return rows
