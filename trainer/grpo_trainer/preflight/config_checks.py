"""verl's view of the config: every key known to verl 0.9.1, and verl's own validate_config passing.

Unknown keys are all reported at once (the trainer's builder stops at the first), each naming the
GRPOJob field it came from.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from grpo_trainer.config import check_known_key, check_not_legacy
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.preflight.fields import field_in_message, spec_field
from grpo_trainer.preflight.verdict import Check
from grpo_trainer.verl_validation import validate_with_verl


def verl_keys(pairs: list[tuple[str, Any]], known: Mapping[str, Any], user_keys: Collection[str]) -> list[Check]:
    """One failed check per key verl 0.9.1 does not have (or silently ignores); one passed check otherwise."""
    failed = []
    for key, value in pairs:
        bare = key.lstrip("+")
        try:
            check_not_legacy(bare, value)
            if not key.startswith("+"):
                check_known_key(known, bare)
        except GrpoConfigError as e:
            failed.append(Check("verl.keys", spec_field(bare, user_keys), False, str(e), bare,
                                "fix the key's spelling, or remove it from spec.verl"))
    if failed:
        return failed
    return [Check("verl.keys", "spec.verl", True, f"{len(pairs)} keys, all known to verl 0.9.1")]


def verl_accepts(cfg: Any, user_keys: Collection[str]) -> Check:
    """verl's validate_config, as main_ppo runs it before Ray starts."""
    try:
        validate_with_verl(cfg)
    except GrpoConfigError as e:
        message = str(e)
        return Check("verl.validate_config", field_in_message(message, user_keys), False, message, "",
                     "change the field verl names (the operator's admission rules normally catch this; "
                     "a spec.verl override may have bypassed them)")
    return Check("verl.validate_config", "spec", True, "verl 0.9.1's validate_config passed")
