"""grpo_trainer.startup.vllm_model_info: vLLM's model-class inspection started on every GPU node as soon as Ray is up.

The pure parts here, then the start on a real local Ray that declares a GPU, with a stand-in for vLLM's
registry module on the workers' path (vLLM is not installed for the CPU tests; its own registry and cache
file ran on the H200 machine: bench/gpu/RESULTS.md)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpo_trainer.startup import vllm_model_info
from grpo_trainer.startup.vllm_model_info import (
    EARLY_ENV,
    SKIPPED_LINE,
    architectures_of,
    gpu_nodes,
    model_info_plan,
    start_model_info,
)
from omegaconf import OmegaConf


def _config(model_path: Path | str, rollout: str = "vllm") -> Any:
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": rollout}, "model": {"path": str(model_path)}}})


def _model(tmp_path: Path, config: dict[str, Any]) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_architectures_come_from_config_json() -> None:
    assert architectures_of({"architectures": ["Qwen2ForCausalLM"]}) == ("Qwen2ForCausalLM",)
    assert architectures_of({"architectures": ["A", "", 3, None, "B"]}) == ("A", "B")
    assert architectures_of({"model_type": "qwen2"}) == ()
    assert architectures_of({"architectures": None}) == ()
    assert architectures_of({"architectures": "Qwen2ForCausalLM"}) == ()  # not a list: not split into letters
    assert architectures_of({"architectures": 5}) == ()
    assert architectures_of(["Qwen2ForCausalLM"]) == ()  # a config.json that is not an object


def test_plan_reads_the_models_architectures(tmp_path: Path) -> None:
    model = _model(tmp_path, {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"})
    assert model_info_plan(_config(model)) == (("Qwen2ForCausalLM",), "")


def test_plan_leaves_other_rollouts_to_themselves(tmp_path: Path) -> None:
    model = _model(tmp_path, {"architectures": ["Qwen2ForCausalLM"]})
    archs, why = model_info_plan(_config(model, rollout="sglang"))
    assert archs == () and "sglang" in why


def test_plan_skips_a_model_path_that_is_not_a_local_directory(tmp_path: Path) -> None:
    archs, why = model_info_plan(_config("Qwen/Qwen2.5-0.5B-Instruct"))
    assert archs == () and "config.json is not a file here" in why
    archs, why = model_info_plan(_config(tmp_path))  # a directory without a config.json
    assert archs == () and str(tmp_path / "config.json") in why


def test_plan_skips_a_config_without_architectures_or_unreadable(tmp_path: Path) -> None:
    model = _model(tmp_path, {"model_type": "qwen2"})
    assert model_info_plan(_config(model)) == ((), f"{model / 'config.json'} names no architectures")
    (model / "config.json").write_text("{not json")
    archs, why = model_info_plan(_config(model))
    assert archs == () and "cannot be read" in why


def test_only_alive_nodes_with_a_gpu_are_warmed() -> None:
    nodes = [
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 4.0}},
        {"NodeID": "actor", "Alive": True, "Resources": {"CPU": 8.0, "GPU": 8.0, "grpo.dev/actor": 8.0}},
        {"NodeID": "gone", "Alive": False, "Resources": {"GPU": 8.0}},
        {"NodeID": "reward", "Alive": True, "Resources": {"GPU": 2.0}},
        {"NodeID": "zero", "Alive": True, "Resources": {"GPU": 0.0}},
    ]
    assert gpu_nodes(nodes) == ["actor", "reward"]


def test_a_config_json_that_is_not_an_object_starts_nothing(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(["Qwen2ForCausalLM"]))
    assert model_info_plan(_config(model)) == ((), f"{model / 'config.json'} names no architectures")


def test_a_failure_in_the_driver_is_never_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_plan(config: Any) -> Any:
        raise PermissionError(13, "Permission denied", "/models/config.json")

    monkeypatch.setattr(vllm_model_info, "model_info_plan", broken_plan)
    assert start_model_info(_config(tmp_path), {}) == []
    assert f"{SKIPPED_LINE}PermissionError" in capsys.readouterr().out


def test_switched_off_it_starts_nothing_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path, {"architectures": ["Qwen2ForCausalLM"]})
    assert start_model_info(_config(model), {EARLY_ENV: "0"}) == []  # no Ray is running: none was asked for
    assert f"{SKIPPED_LINE}{EARLY_ENV}=0" in capsys.readouterr().out


def test_without_architectures_it_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert start_model_info(_config("Qwen/Qwen2.5-0.5B-Instruct"), {}) == []
    assert SKIPPED_LINE in capsys.readouterr().out


def test_without_vllm_the_task_reports_and_inspects_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    if _vllm_installed():
        pytest.skip("vLLM is installed here: its registry would run")
    assert vllm_model_info.inspect_architectures(["Qwen2ForCausalLM"]) == {}
    assert SKIPPED_LINE in capsys.readouterr().out


def _vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# --------------------------------------------------------- on a real local Ray with a stand-in registry

STAND_IN_PLUGINS = '''
import os

def load_general_plugins():
    os.environ["STAND_IN_PLUGINS_LOADED"] = "1"
'''

STAND_IN_REGISTRY = '''
import json, os, pathlib

class _Lazy:
    def __init__(self, name):
        self.name = name

    def inspect_model_cls(self):
        out = pathlib.Path(os.environ["STAND_IN_MODELINFOS"]) / (self.name + ".json")
        seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "STAND_IN_PLUGINS_LOADED")}
        out.write_text(json.dumps({"pid": os.getpid(), **seen}))

class _Broken:
    def inspect_model_cls(self):
        raise RuntimeError("cannot inspect")

class _Registry:
    models = {"Qwen2ForCausalLM": _Lazy("Qwen2ForCausalLM"), "BrokenForCausalLM": _Broken()}

ModelRegistry = _Registry()
'''


@pytest.fixture(scope="module")
def stand_in_vllm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a `vllm` package with only the registry and plugins modules the task uses."""
    root = tmp_path_factory.mktemp("stand-in-vllm")
    package = root / "vllm" / "model_executor" / "models"
    package.mkdir(parents=True)
    (root / "vllm" / "plugins").mkdir()
    for init in (root / "vllm", root / "vllm" / "model_executor", package):
        (init / "__init__.py").write_text("")
    (root / "vllm" / "plugins" / "__init__.py").write_text(STAND_IN_PLUGINS)
    (package / "registry.py").write_text(STAND_IN_REGISTRY)
    (root / "modelinfos").mkdir()
    return root


def test_an_inspection_with_nothing_ready_says_so(
    stand_in_vllm: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(stand_in_vllm))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # what Ray gives a task that asks for no GPU
    monkeypatch.setenv("STAND_IN_MODELINFOS", str(stand_in_vllm / "modelinfos"))
    outcomes = vllm_model_info.inspect_architectures(["NotAModelForCausalLM", "BrokenForCausalLM"])
    assert outcomes["NotAModelForCausalLM"] == "not in vLLM's registry"
    out = capsys.readouterr().out
    assert vllm_model_info.NOT_READY_LINE in out and vllm_model_info.READY_LINE not in out
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # an empty value is removed before vLLM is imported
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]  # the stand-in must not outlive the test in this process


@pytest.fixture(scope="module")
def ray_with_a_gpu(stand_in_vllm: Path) -> Iterator[Path]:
    import ray

    root = stand_in_vllm
    infos = root / "modelinfos"
    path = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    # an empty CUDA_VISIBLE_DEVICES, as Ray 2.52 gives a task that asks for no GPU (later Rays may not)
    env = {"PYTHONPATH": path, "STAND_IN_MODELINFOS": str(infos), "CUDA_VISIBLE_DEVICES": ""}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")  # never a cluster another test started with `ray start`
        ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, runtime_env={"env_vars": env})
    yield infos
    ray.shutdown()


@pytest.mark.slow
def test_the_inspection_runs_on_the_gpu_node_and_its_process_ends(ray_with_a_gpu: Path, tmp_path: Path) -> None:
    import ray

    archs = ["Qwen2ForCausalLM", "BrokenForCausalLM", "NotAModelForCausalLM"]
    model = _model(tmp_path, {"architectures": archs})
    refs = start_model_info(_config(model), {})
    assert len(refs) == 1  # the one node, which declares a GPU
    outcomes = ray.get(refs[0], timeout=120)
    assert outcomes["Qwen2ForCausalLM"] == "ready"
    assert outcomes["BrokenForCausalLM"].startswith("failed: RuntimeError('cannot inspect'")
    assert outcomes["NotAModelForCausalLM"] == "not in vLLM's registry"
    written = json.loads((ray_with_a_gpu / "Qwen2ForCausalLM.json").read_text())
    # vLLM's plugins were loaded first, and vLLM never saw the empty CUDA_VISIBLE_DEVICES
    assert written["STAND_IN_PLUGINS_LOADED"] == "1" and written["CUDA_VISIBLE_DEVICES"] is None
    # the task's worker imported "vLLM": it must not stay in Ray's worker pool
    deadline = time.monotonic() + 30
    while _alive(written["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(written["pid"])


@pytest.mark.slow
def test_a_node_without_a_gpu_gets_no_inspection(
    ray_with_a_gpu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    cpu_only = [{**n, "Resources": {k: v for k, v in n["Resources"].items() if k != "GPU"}} for n in ray.nodes()]
    monkeypatch.setattr(ray, "nodes", lambda: cpu_only)
    model = _model(tmp_path, {"architectures": ["Qwen2ForCausalLM"]})
    assert start_model_info(_config(model), {}) == []
    assert SKIPPED_LINE not in capsys.readouterr().out  # nothing failed: there was no node to ask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie left for Ray's raylet to reap has ended too
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
