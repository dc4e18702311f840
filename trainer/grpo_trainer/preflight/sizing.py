"""verl's token budgets and memory knobs, sized from the memory-fit estimate (fit.py) for one job on its GPUs.

The preflight knows what nobody else does before the GPUs are taken: the model's real shape (its
config.json), the lengths and batch of the job, and the GPU memory of each pool (a node label or
placement.gpuMemory, from the operator). verl's own defaults and example scripts are sized for 80 GB cards
and a 7B model; these functions size the same knobs for the job at hand:

- how many sequences (or, with packed sequences, tokens) one forward/backward and one log-prob forward
  take on a GPU: the largest that keeps the phase's estimated peak under the GPU's usable memory;
- how much of the GPU vLLM may take: enough KV cache for every sequence of a step at once, never more than
  is left beside what stays on the GPU while it generates (colocated: the actor's weights and moments);
- vLLM's concurrency (max_num_seqs): every sequence of a step in one wave instead of verl's 256 at a time;
- vLLM's prefill chunk (max_num_batched_tokens): the step's prompts in few chunks.

Fail-safe: every phase is sized to (1 - SAFETY_MARGIN) of the GPU by an estimate that over-predicts the
actor's update (bench/fit/RESULTS.md: up to +104 %) and whose worst under-prediction measured on an H200 was
20.2 % (the reference forward): 1 / (1 - 0.2) = 1.25 covers it. The margin has been overrun once: the log-prob
forward's logits were counted at 8 bytes an element where verl itself holds 15, so on one H100 the Qwen2.5-1.5B
benchmark's sized log-prob micro batch (32, estimated 49.6 GiB) peaked at 71.8 GiB allocated and the whole GPU at
81,015 of 81,559 MiB (bench/gpu/RESULTS.md, 2026-12-06 d); fit.py now counts 15, measured on two model shapes.
Where an input is unknown (no GPU memory, a model shape the estimate does not know) or not even the smallest
setting fits, nothing is sized and the operator's fixed defaults stay; the fit check then says why. A knob the
user set is never sized.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grpo_trainer.preflight.fit import (
    PROCESS_OVERHEAD,
    ActorLayout,
    GiB,
    ModelShape,
    RolloutLayout,
    actor_log_prob,
    actor_update,
    reference_log_prob,
    vllm_budget,
)

SAFETY_MARGIN = 0.2
# Packed token budgets move in these steps (verl packs whole sequences up to the budget).
TOKEN_STEP = 1024
# vLLM's prefill chunk: never below verl's default, never so large that its profiling batch crowds the KV cache.
MIN_BATCHED_TOKENS = 8192
MAX_BATCHED_TOKENS = 32768
# vLLM's concurrency: verl's default is 256; above this the scheduler's own per-step work grows for little gain.
MAX_NUM_SEQS = 1024
# KV cache asked for beyond every sequence of a step at full length: vLLM's blocks are rounded up per sequence.
KV_HEADROOM = 1.1
# Beside the KV cache vLLM's budget holds what the estimate does not count: its CUDA graphs, the sampler's logits of
# max_num_seqs sequences, the allocator's slack. Fixed, so that a small model's small budget is not all KV cache.
VLLM_SLACK = 2 * GiB

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
UPDATE_MICRO = f"{ACTOR}.ppo_micro_batch_size_per_gpu"
LOG_PROB_MICROS = (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{REF}.log_prob_micro_batch_size_per_gpu")
DYNAMIC_BSZ = f"{ACTOR}.use_dynamic_bsz"
UPDATE_TOKENS = f"{ACTOR}.ppo_max_token_len_per_gpu"
LOG_PROB_TOKENS = (f"{ROLLOUT}.log_prob_max_token_len_per_gpu", f"{REF}.log_prob_max_token_len_per_gpu")
UTILIZATION = f"{ROLLOUT}.gpu_memory_utilization"
MAX_SEQS = f"{ROLLOUT}.max_num_seqs"
BATCHED_TOKENS = f"{ROLLOUT}.max_num_batched_tokens"
# Every key a sizing may set; the operator hands the preflight the subset the user left to it (grpo.sizedKeys).
SIZABLE_KEYS: tuple[str, ...] = (
    UPDATE_MICRO, *LOG_PROB_MICROS, DYNAMIC_BSZ, UPDATE_TOKENS, *LOG_PROB_TOKENS, UTILIZATION, MAX_SEQS,
    BATCHED_TOKENS,
)


@dataclass(frozen=True)
class Workload:
    """What one step asks of the GPUs, from the job's batch, lengths and layout."""

    prompt_len: int
    response_len: int
    sequences_per_step: int  # data.train_batch_size x rollout.n
    sequences_per_update: int  # actor.ppo_mini_batch_size x rollout.n
    actor_gpus: int
    engines: int  # vLLM engines: the rollout's GPUs / tensor parallel
    # Sequences packed without padding (use_remove_padding with a varlen attention): token budgets and dynamic
    # micro batches. Otherwise every micro batch is padded sequences of seq_len tokens: fixed micro batches.
    packed: bool

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.response_len

    @property
    def update_sequences_per_gpu(self) -> int:
        return max(self.sequences_per_update // self.actor_gpus, 1)

    @property
    def step_sequences_per_gpu(self) -> int:
        return max(self.sequences_per_step // self.actor_gpus, 1)

    @property
    def sequences_per_engine(self) -> int:
        return max(-(-self.sequences_per_step // max(self.engines, 1)), 1)


@dataclass(frozen=True)
class Choice:
    keys: tuple[tuple[str, Any], ...]
    reason: str


@dataclass(frozen=True)
class Sizing:
    """The sized verl keys and, for each choice, why."""

    choices: tuple[Choice, ...]
    gpu_memory: int
    margin: float = SAFETY_MARGIN

    def values(self) -> dict[str, Any]:
        return {k: v for c in self.choices for k, v in c.keys}

    def summary(self) -> str:
        head = f"sized for {self.gpu_memory / GiB:.0f} GiB GPUs, {self.margin:.0%} left free by the estimate"
        return "; ".join([head, *(c.reason for c in self.choices)])

    def allowed(self, keys: Collection[str]) -> Sizing:
        """Only the choices whose every key the user left to the sizing."""
        return replace(self, choices=tuple(c for c in self.choices if all(k in keys for k, _ in c.keys)))


def usable_memory(gpu_memory: int, margin: float = SAFETY_MARGIN) -> int:
    return int(gpu_memory * (1 - margin))


def largest_fitting(candidates: Sequence[int], peak_of: Callable[[int], int], usable: int) -> int | None:
    """The largest candidate (ascending; peak_of rises with it) whose peak fits `usable`, by bisection."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if peak_of(candidates[mid]) <= usable:
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    return best


def divisors(n: int) -> list[int]:
    """Ascending divisors of n: verl refuses micro batches that do not split a GPU's share evenly."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def token_candidates(seq_len: int, ceiling: int) -> list[int]:
    """Packed budgets: at least one whole sequence, then TOKEN_STEP steps up to the GPU's whole share."""
    return sorted({seq_len, *range(-(-seq_len // TOKEN_STEP) * TOKEN_STEP, max(ceiling, seq_len) + 1, TOKEN_STEP)})


def _update_peak(model: ModelShape, actor: ActorLayout) -> int:
    return actor_update(model, actor).total + PROCESS_OVERHEAD


def _log_prob_peak(model: ModelShape, actor: ActorLayout) -> int:
    peaks = [actor_log_prob(model, actor).total]
    if actor.use_reference:
        peaks.append(reference_log_prob(model, actor).total)
    return max(peaks) + PROCESS_OVERHEAD


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def size_micro_batches(model: ModelShape, actor: ActorLayout, work: Workload, usable: int) -> list[Choice]:
    """Fixed micro batches of padded sequences: the largest even split of a GPU's share whose peak fits."""
    choices = []
    update = replace(actor, seq_len=work.seq_len)
    micro = largest_fitting(divisors(work.update_sequences_per_gpu),
                            lambda m: _update_peak(model, replace(update, micro_batch=m)), usable)
    if micro is not None:
        peak = _update_peak(model, replace(update, micro_batch=micro))
        choices.append(Choice(((UPDATE_MICRO, micro),), f"update micro batch {micro} sequences of {work.seq_len} "
                              f"tokens (estimated peak {_gib(peak)})"))
    log_micro = largest_fitting(divisors(work.step_sequences_per_gpu),
                                lambda m: _log_prob_peak(model, replace(update, log_prob_micro_batch=m)), usable)
    if log_micro is not None:
        peak = _log_prob_peak(model, replace(update, log_prob_micro_batch=log_micro))
        choices.append(Choice(tuple((k, log_micro) for k in LOG_PROB_MICROS),
                              f"log-prob micro batch {log_micro} (estimated peak {_gib(peak)})"))
    return choices


def size_token_budgets(model: ModelShape, actor: ActorLayout, work: Workload, usable: int) -> list[Choice]:
    """Packed sequences: dynamic micro batches up to the largest token budget whose peak fits."""
    one = replace(actor, micro_batch=1, log_prob_micro_batch=1)
    update = largest_fitting(token_candidates(work.seq_len, work.update_sequences_per_gpu * work.seq_len),
                             lambda t: _update_peak(model, replace(one, seq_len=t)), usable)
    log_prob = largest_fitting(token_candidates(work.seq_len, work.step_sequences_per_gpu * work.seq_len),
                               lambda t: _log_prob_peak(model, replace(one, seq_len=t)), usable)
    if update is None or log_prob is None:
        return []
    keys = ((DYNAMIC_BSZ, True), (UPDATE_TOKENS, update), *((k, log_prob) for k in LOG_PROB_TOKENS))
    return [Choice(keys, f"dynamic micro batches of up to {update} tokens per update and {log_prob} per log-prob "
                         f"forward (estimated peaks {_gib(_update_peak(model, replace(one, seq_len=update)))} and "
                         f"{_gib(_log_prob_peak(model, replace(one, seq_len=log_prob)))})")]


def batched_tokens(work: Workload, max_model_len: int) -> int:
    """vLLM's prefill chunk: a step's prompts of one engine in as few chunks as the bounds allow."""
    wanted = work.sequences_per_engine * work.prompt_len
    bounded = min(max(wanted, MIN_BATCHED_TOKENS), MAX_BATCHED_TOKENS)
    return max(-(-bounded // TOKEN_STEP) * TOKEN_STEP, max_model_len)


def size_rollout(model: ModelShape, actor: ActorLayout, rollout: RolloutLayout, work: Workload,
                 gpu_memory: int, usable: int) -> list[Choice]:
    """vLLM's share of the GPU, its concurrency and its prefill chunk."""
    tokens = batched_tokens(work, rollout.max_model_len)
    beside = PROCESS_OVERHEAD  # vLLM's own process
    if rollout.colocated:  # the actor's weights and moments stay on the GPU while vLLM generates
        shard = model.params / actor.gpus
        beside += PROCESS_OVERHEAD + int((0 if actor.param_offload else 4 * shard)
                                         + (0 if actor.optimizer_offload else 8 * shard))
    cap = math.floor((usable - beside) / gpu_memory * 100) / 100
    sized = replace(rollout, max_num_batched_tokens=tokens, gpu_memory_utilization=cap)
    at_cap = vllm_budget(model, sized, gpu_memory)
    per_sequence = model.kv_bytes_per_token(rollout.tensor_parallel) * work.seq_len
    if cap <= 0 or at_cap.kv_cache < at_cap.kv_needed:
        return []  # not even one sequence beside the actor: the fit check says so, with its fix
    wanted_kv = int(per_sequence * work.sequences_per_engine * KV_HEADROOM)
    needed = (at_cap.weights + at_cap.activations + wanted_kv + VLLM_SLACK) / gpu_memory
    utilization = min(cap, math.ceil(needed * 100) / 100)
    kv = vllm_budget(model, replace(sized, gpu_memory_utilization=utilization), gpu_memory).kv_cache
    seqs = max(min(work.sequences_per_engine, kv // per_sequence, MAX_NUM_SEQS), 1)
    waves = -(-work.sequences_per_engine // seqs)
    capped = ", capped by the memory beside the actor"
    return [
        Choice(((UTILIZATION, utilization),),
               f"vLLM takes {utilization:.2f} of the GPU ({_gib(kv)} KV cache for {work.sequences_per_engine} "
               f"sequences of {work.seq_len} tokens{capped if utilization == cap else ''})"),
        Choice(((MAX_SEQS, seqs),), f"vLLM runs {seqs} sequences at once ({waves} wave{'s' if waves > 1 else ''} "
                                   f"per step)"),
        Choice(((BATCHED_TOKENS, tokens),), f"vLLM prefills up to {tokens} tokens per step"),
    ]


def size(model: ModelShape, actor: ActorLayout, rollout: RolloutLayout, work: Workload,
         gpu_memory: dict[str, int], margin: float = SAFETY_MARGIN) -> Sizing | None:
    """Every knob this job's GPUs allow, or None when the actor pool's GPU memory is unknown."""
    if "actor" not in gpu_memory:
        return None
    usable = usable_memory(gpu_memory["actor"], margin)
    training = (size_token_budgets if work.packed else size_micro_batches)(model, actor, work, usable)
    pool = "actor" if rollout.colocated else "rollout"
    generation: list[Choice] = []
    if pool in gpu_memory:
        generation = size_rollout(model, actor, rollout, work, gpu_memory[pool],
                                  usable_memory(gpu_memory[pool], margin))
    return Sizing(tuple(training + generation), gpu_memory["actor"], margin)
