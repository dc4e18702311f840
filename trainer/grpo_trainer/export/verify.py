"""--verify: load the written model the way a user will, and hold it against the checkpoint.

Loading with transformers needs the whole model in memory once; that is the price of checking
what ``from_pretrained`` really sees (key names, tied weights, dtype), and it is opt-in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from grpo_trainer.export.errors import VerificationError
from grpo_trainer.export.source import Source


def verify_export(
    directory: Path,
    source: Source,
    out_dtype_for: Callable[[torch.dtype], torch.dtype],
    log: Callable[[str], None],
) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype="auto")
    model.eval()
    loaded = model.state_dict()
    mismatched: list[str] = []
    checked = 0
    for plan in source.plans:
        expected = source.merged(plan, out_dtype_for(plan.dtype))
        names = [plan.key] + [a for a, canon in source.aliases.items() if canon == plan.key]
        for name in names:
            got = loaded.get(name)
            # Bit-exact: the same cast of the same source bytes must give the same bytes.
            if got is None or got.dtype != expected.dtype or not torch.equal(got, expected):
                mismatched.append(name)
            checked += 1
        del expected
    if mismatched:
        raise VerificationError(
            "VerificationFailed",
            f"{len(mismatched)} tensor(s) loaded by transformers differ from the checkpoint: {mismatched[:5]}.",
            "Report this with the checkpoint's fsdp_config.json; do not publish these weights.",
        )
    extra = sorted(set(loaded) - {p.key for p in source.plans} - set(source.aliases))
    vocab = int(getattr(model.config, "vocab_size", 2) or 2)
    ids = torch.arange(1, 9).remainder(vocab).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    if not torch.isfinite(logits).all():
        raise VerificationError(
            "VerificationFailed",
            "The forward pass of the exported model gave NaN/inf logits.",
            "Check the checkpoint itself (training may have diverged at this step).",
        )
    log(f"verify: {checked} tensors bit-identical to the checkpoint, forward pass logits {tuple(logits.shape)} finite")
    return {"tensorsChecked": checked, "unexpectedKeys": extra[:10]}
