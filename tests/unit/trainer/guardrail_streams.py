"""Synthetic step streams for the guardrail tests: healthy runs that look alarming, and injected pathologies.

Each stream is a list of StepSample built from smooth curves plus seeded noise of about the size real
runs show (bench/gpu/results/2026-12-03: entropy and KL move a few %, grad norm ~15% step to step).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from grpo_trainer.guardrails import StepSample

Curve = Callable[[int], float]


@dataclass(frozen=True)
class Curves:
    entropy: Curve = lambda t: 1.0
    kl: Curve = lambda t: 0.002 * t
    grad: Curve = lambda t: 0.3
    reward: Curve = lambda t: 0.1 + 0.4 * (1 - math.exp(-t / 30))
    reward_std: Curve = lambda t: 0.4
    clip: Curve = lambda t: 0.05


def stream(curves: Curves = Curves(), steps: int = 80, seed: int = 0) -> list[StepSample]:
    rng = random.Random(seed)
    out = []
    for t in range(1, steps + 1):
        reward = curves.reward(t) + 0.02 * rng.gauss(0, 1)
        spread = max(0.0, curves.reward_std(t) * (1 + 0.05 * rng.gauss(0, 1)))
        out.append(
            StepSample(
                step=t,
                loss=-0.02 + 0.01 * rng.gauss(0, 1),
                pg_loss=-0.02 + 0.01 * rng.gauss(0, 1),
                entropy=curves.entropy(t) * (1 + 0.02 * rng.gauss(0, 1)),
                kl_loss=max(0.0, curves.kl(t) * (1 + 0.1 * rng.gauss(0, 1))),
                grad_norm=curves.grad(t) * math.exp(0.15 * rng.gauss(0, 1)),
                reward_mean=reward,
                reward_std=spread,
                reward_max=reward + 2.5 * spread,
                clip_ratio=min(1.0, max(0.0, curves.clip(t) + 0.02 * rng.gauss(0, 1))),
            )
        )
    return out


def after(onset: int, before: Curve, then: Curve) -> Curve:
    return lambda t: then(t) if t >= onset else before(t)


# --- healthy, but alarming at a glance -----------------------------------------------------------


def entropy_drop_while_reward_rises() -> list[StepSample]:
    """Entropy falls 100x (to 0.05x its warm-up median) in the first 30 steps while reward climbs
    0.1 -> 0.7 and keeps its spread: the policy is getting sure of what works, not collapsing."""
    return stream(
        Curves(
            entropy=lambda t: 0.01 + 0.99 * math.exp(-t / 6),
            reward=lambda t: 0.1 + 0.6 * (1 - math.exp(-t / 25)),
            reward_std=lambda t: 0.4 - 0.1 * t / 80,
        )
    )


def kl_growing_slowly_on_a_reward_plateau() -> list[StepSample]:
    """KL grows 5% a step (50x over the run) while reward is flat: drift, not a runaway."""
    return stream(
        Curves(
            kl=lambda t: 0.005 * 1.05**t,
            reward=lambda t: 0.5,
            entropy=lambda t: 1.0 - 0.2 * t / 80,
        )
    )


def growing_response_length() -> list[StepSample]:
    """Responses lengthen until nearly all are cut at max length (clip ratio -> 1.0 from step 50, as the
    recorded H200 `learn` run did), the grad norm triples with them; the reward keeps its spread."""
    return stream(
        Curves(
            clip=lambda t: min(1.0, 0.02 * t),
            grad=lambda t: 0.3 * (1 + 2 * t / 80),
            reward=lambda t: 0.2 + 0.3 * t / 80,
            reward_std=lambda t: 0.3,
        )
    )


def gradient_spike_that_recovers() -> list[StepSample]:
    """One 20x grad-norm spike at step 45 and two 10x ones at 60-61; the run is normal around them."""
    spikes = {45: 20.0, 60: 10.0, 61: 10.0}
    return [replace(s, grad_norm=s.grad_norm * spikes.get(s.step, 1.0)) for s in stream()]


HEALTHY = {
    "entropy_drop_while_reward_rises": entropy_drop_while_reward_rises,
    "kl_growing_slowly_on_a_reward_plateau": kl_growing_slowly_on_a_reward_plateau,
    "growing_response_length": growing_response_length,
    "gradient_spike_that_recovers": gradient_spike_that_recovers,
}

# --- pathologies, injected at ONSET into an otherwise healthy run ---------------------------------

ONSET = 40


def kl_step_change(factor: float = 50.0) -> list[StepSample]:
    base = Curves().kl
    return stream(Curves(kl=after(ONSET, base, lambda t: factor * base(t))))


def kl_ramp() -> list[StepSample]:
    """KL multiplies by 1.5 every step from ONSET (doubling in under 2 steps)."""
    base = Curves().kl
    return stream(Curves(kl=after(ONSET, base, lambda t: base(t) * 1.5 ** (t - ONSET + 1))))


def nan_grad_norm(at: int = 33) -> list[StepSample]:
    return [replace(s, grad_norm=None, non_finite=("grad_norm",)) if s.step == at else s for s in stream()]


def grad_step_change(factor: float = 10.0) -> list[StepSample]:
    return stream(Curves(grad=after(ONSET, lambda t: 0.3, lambda t: 0.3 * factor)))


def collapse() -> list[StepSample]:
    """From ONSET entropy and reward std drop to 0.02x their earlier level, the reward flat."""
    return stream(
        Curves(
            entropy=after(ONSET, lambda t: 1.0, lambda t: 0.02),
            reward_std=after(ONSET, lambda t: 0.4, lambda t: 0.008),
            reward=lambda t: 0.3,
        )
    )


def degenerate_batch() -> list[StepSample]:
    """From ONSET every response is cut at max length and all score the same."""
    return stream(
        Curves(
            clip=after(ONSET, lambda t: 0.3, lambda t: 1.0),
            reward_std=after(ONSET, lambda t: 0.4, lambda t: 0.0),
        )
    )


# --- a low-temperature run: most steps carry no learning signal ---------------------------------


def no_signal(t: int) -> bool:
    """5 steps in 8 have no learning signal (22 of 40 in the H200 guard-temp run); the others come in a
    burst of 3 within 4 steps, as there (steps 21, 23, 24), enough for grad_spike's 3 of 5."""
    return t % 8 not in (0, 1, 3)


def bimodal_zero_advantage(spike_from: int | None = None, factor: float = 10.0) -> list[StepSample]:
    """On the no-signal steps every group scored alike: reward std 0, every advantage 0, and the grad norm
    is the KL term's alone (~0.01, 30x under the others: guard-temp had 0.01 against 0.7). The trailing
    median of all steps sits on that small mode. From `spike_from` the signal steps' grad norm is x factor."""
    out = []
    for s in stream():
        if no_signal(s.step):
            flat = replace(s, reward_std=0.0, reward_max=s.reward_mean, advantage_max=0.0, advantage_min=0.0)
            out.append(replace(flat, grad_norm=s.grad_norm * 0.03))
        else:
            spike = factor if spike_from is not None and s.step >= spike_from else 1.0
            out.append(replace(s, advantage_max=1.5, advantage_min=-1.5, grad_norm=s.grad_norm * spike))
    return out
