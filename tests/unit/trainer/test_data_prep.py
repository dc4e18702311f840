"""JSONL -> parquet in the chat shape verl's RLHFDataset reads; bad input stops with its line number."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from grpo_trainer.data_prep import chat_token_counter, convert_jsonl, execute_plan, plan_data
from grpo_trainer.errors import DataPrepError


def prompt_tokens(n_words: int) -> int:
    return n_words + 5  # the tiny tokenizer's chat template adds 5 tokens (see preflight_pod.CHAT_TEMPLATE)


MAX_PROMPT = 12  # tokens: prompts of up to 7 words fit (7 + 5 template tokens)


@pytest.fixture(scope="module")
def count_tokens(tokenizer_model_dir: Path):
    from transformers import AutoTokenizer

    return chat_token_counter(AutoTokenizer.from_pretrained(str(tokenizer_model_dir)))


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _words(n: int) -> str:
    return " ".join(["w"] * n)


def test_token_counter_counts_the_chat_template(count_tokens) -> None:
    assert count_tokens([{"role": "user", "content": _words(4)}]) == prompt_tokens(4)


def test_good_file_becomes_chat_prompts_verl_can_read(tmp_path: Path, count_tokens, tokenizer_model_dir) -> None:
    src = _jsonl(
        tmp_path / "train.jsonl",
        [
            {"prompt": _words(3), "ground_truth": "42", "data_source": "math"},
            {"prompt": [{"role": "system", "content": "w"}, {"role": "user", "content": _words(1)}]},
        ],
    )
    report = convert_jsonl(str(src), str(tmp_path / "out" / "train.parquet"), count_tokens, MAX_PROMPT)
    assert (report.kept, report.dropped_lines) == (2, [])
    rows = pq.read_table(report.target).to_pylist()
    assert rows[0]["prompt"] == [{"role": "user", "content": "w w w"}]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "42"}
    assert rows[0]["data_source"] == "math"
    assert rows[1]["prompt"][0] == {"role": "system", "content": "w"}

    # and verl 0.9.1's own dataset loads it
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    ds = RLHFDataset(
        data_files=[report.target],
        tokenizer=AutoTokenizer.from_pretrained(str(tokenizer_model_dir)),
        config=OmegaConf.create(
            {"max_prompt_length": MAX_PROMPT, "prompt_key": "prompt", "filter_overlong_prompts": False}
        ),
    )
    assert len(ds) == 2


def test_oversize_rows_are_reported_and_dropped(tmp_path: Path, count_tokens, caplog) -> None:
    src = _jsonl(tmp_path / "train.jsonl", [{"prompt": _words(7)}, {"prompt": _words(8)}, {"prompt": _words(2)}])
    report = convert_jsonl(str(src), str(tmp_path / "train.parquet"), count_tokens, MAX_PROMPT)
    assert (report.kept, report.dropped_lines) == (2, [2])
    assert "dropped 1 of 3" in caplog.text and "lines 2" in caplog.text
    assert [r["extra_info"]["line"] for r in pq.read_table(report.target).to_pylist()] == [1, 3]


def test_oversize_rows_are_refused_when_asked(tmp_path: Path, count_tokens) -> None:
    src = _jsonl(tmp_path / "train.jsonl", [{"prompt": _words(1)}, {"prompt": _words(20)}])
    with pytest.raises(DataPrepError, match=r"train\.jsonl:2: prompt is 25 tokens"):
        convert_jsonl(str(src), str(tmp_path / "train.parquet"), count_tokens, MAX_PROMPT, oversize="refuse")
    assert not (tmp_path / "train.parquet").exists()


def test_empty_file_stops_with_line_1(tmp_path: Path, count_tokens) -> None:
    src = tmp_path / "train.jsonl"
    src.write_text("\n  \n")
    with pytest.raises(DataPrepError, match=r"train\.jsonl:1: file is empty"):
        convert_jsonl(str(src), str(tmp_path / "t.parquet"), count_tokens, MAX_PROMPT)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"prompt": "w w"', r"train\.jsonl:3: not valid JSON"),
        ('["w"]', r"train\.jsonl:3: expected a JSON object"),
        ('{"question": "w"}', r"train\.jsonl:3: missing 'prompt'"),
        ('{"prompt": [{"role": "user"}]}', r"train\.jsonl:3: each prompt message needs"),
    ],
)
def test_malformed_line_stops_with_its_number(tmp_path: Path, count_tokens, bad_line: str, message: str) -> None:
    src = _jsonl(tmp_path / "train.jsonl", [{"prompt": "w"}, "", bad_line, {"prompt": "w"}])
    with pytest.raises(DataPrepError, match=message):
        convert_jsonl(str(src), str(tmp_path / "t.parquet"), count_tokens, MAX_PROMPT)


def test_plan_converts_jsonl_keeps_parquet_and_generates_a_val_file(tmp_path: Path, count_tokens) -> None:
    src = _jsonl(tmp_path / "a.jsonl", [{"prompt": "w"}])
    prepared = tmp_path / "prepared"
    plan = plan_data([str(src)], [], str(prepared))
    assert plan.train_files == [str(prepared / "a.parquet")]
    assert plan.val_files == [str(prepared / "val.generated.parquet")]
    execute_plan(plan, count_tokens, MAX_PROMPT, "drop")
    assert pq.read_table(plan.val_files[0]).num_rows == 1
    with pytest.raises(DataPrepError, match="unsupported data file type"):
        plan_data([str(tmp_path / "a.csv")], [], str(prepared))
