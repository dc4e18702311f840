"""grpo_trainer's layout, read from its source with `ast` (nothing of it is imported: no torch, no verl)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "trainer" / "grpo_trainer"
# the modules of the path to step 1, grouped in grpo_trainer.startup (issue 33)
STARTUP_MODULES = {
    "agent_loop", "early_servers", "ray_names", "ray_start", "rollout_server", "task_runner",
    "task_runner_actor", "task_runner_host", "transfer_queue_start", "vllm_executor", "vllm_model_info",
}


def module_name(path: Path) -> str:
    """grpo_trainer.preflight.config_checks for .../grpo_trainer/preflight/config_checks.py."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, anywhere in it, relative imports resolved; for `from M import n`
    both M and M.n, since n may be a submodule."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_preflight_does_not_import_the_cli() -> None:
    modules = (PACKAGE / "preflight").rglob("*.py")
    importers = sorted(module_name(path) for path in modules if "grpo_trainer.cli" in imported_modules(path))
    assert importers == [], f"{importers} import grpo_trainer.cli: the cli imports the preflight, not the other way"


def test_the_start_up_modules_are_in_the_startup_package_only() -> None:
    top_level = {path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or path.is_dir()}
    assert top_level & STARTUP_MODULES == set()
    assert {path.stem for path in (PACKAGE / "startup").glob("*.py")} >= STARTUP_MODULES
