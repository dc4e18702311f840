"""CPU calibration of the learning run: can GRPO raise the target-word reward of the tiny random model?

    python bench/gpu/calibrate_learning.py --lr 1e-3 --steps 30     # ~20-40 s a step on a 2-core machine
    python bench/gpu/calibrate_learning.py --lr 0 --steps 14        # the control

Not verl: a plain-torch sketch of what verl 0.9.1's GRPO does with the bench's settings, to choose the
learning rate before device time is spent. Per step: 16 prompts x 4 answers sampled at temperature 1
(64 tokens at most), the reward of bench/gpu/token_reward.py, the group-normalised advantage
(reward - group mean) / (group std + 1e-6), one AdamW update (weight decay 0.01, gradients clipped at
1.0) of the token-mean policy-gradient loss (on-policy: PPO's ratio is 1; KL loss left out, its
coefficient is 0.001). Prints each step's mean reward and the learning.py slope of the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning
import steplog
import tiny_model
import token_reward

PROMPTS_PER_STEP = 16
SAMPLES_PER_PROMPT = 4
MAX_NEW_TOKENS = 64


def group_advantages(rewards: list[float]) -> list[float]:
    """GRPO's advantage within one prompt's group (verl: norm_adv_by_std_in_grpo, epsilon 1e-6)."""
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--work", type=Path, default=Path("/tmp/grpo-calibrate"))
    a = p.parse_args(argv)

    model_dir, prompts_file = a.work / "model", a.work / "prompts.jsonl"
    if not (model_dir / "config.json").exists():
        tiny_model.build_model_dir(model_dir)
    tiny_model.write_prompts(prompts_file, PROMPTS_PER_STEP * a.steps)
    prompts = [json.loads(line)["prompt"] for line in prompts_file.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.01)
    steps = []
    for step in range(1, a.steps + 1):
        batch = prompts[(step - 1) * PROMPTS_PER_STEP : step * PROMPTS_PER_STEP]
        samples, rewards = [], []
        model.eval()
        for prompt in batch:
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            inp = torch.tensor([ids] * SAMPLES_PER_PROMPT)
            with torch.no_grad():
                out = model.generate(
                    inp,
                    attention_mask=torch.ones_like(inp),
                    do_sample=True,
                    top_k=0,
                    top_p=1.0,
                    temperature=1.0,
                    max_new_tokens=MAX_NEW_TOKENS,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id,
                )
            answers = out[:, inp.shape[1] :]
            scores = [
                token_reward.target_share(tok.decode(x[x != tok.pad_token_id], skip_special_tokens=True))
                for x in answers
            ]
            rewards += scores
            samples += zip(inp, answers, group_advantages(scores), strict=True)
        steps.append(steplog.Step(step, {steplog.REWARD: statistics.fmean(rewards)}))
        model.train()
        opt.zero_grad()
        loss, tokens = torch.zeros(()), 0.0
        for prompt_ids, answer, advantage in samples:
            mask = torch.ones_like(answer, dtype=torch.float)
            if (answer == tok.eos_token_id).any():  # nothing after the answer's end counts
                mask[int((answer == tok.eos_token_id).nonzero()[0]) + 1 :] = 0
            logits = model(torch.cat([prompt_ids, answer]).unsqueeze(0)).logits[0, len(prompt_ids) - 1 : -1]
            logp = torch.log_softmax(logits.float(), -1).gather(-1, answer.unsqueeze(-1)).squeeze(-1)
            loss = loss - (advantage * logp * mask).sum()
            tokens += float(mask.sum())
        (loss / tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {step}: mean reward {statistics.fmean(rewards):.4f}", flush=True)
    print(learning.reward_slope(steps).describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
