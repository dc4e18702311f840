"""What to train and how: the policy model, the data, how long, the GRPO algorithm, the rollout engine
and the reward."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from grpo_operator.api.base import ApiModel, Name, RelPath, cel, validations


class ModelSource(ApiModel):
    """A HuggingFace model directory on a PersistentVolumeClaim, mounted read-only."""

    claim_name: Name = Field(
        description="Name of a PersistentVolumeClaim in the job's namespace holding the model; mounted read-only."
    )
    path: RelPath = Field(
        description="Directory of the HuggingFace model (config.json, weights, tokenizer) relative to the "
        "claim's root, e.g. Qwen2-7B-Instruct."
    )


class DataSpec(ApiModel):
    """Training prompts on a PVC and the sequence/batch sizes verl trains with."""

    claim_name: Name = Field(
        description="Name of a PersistentVolumeClaim holding the datasets; mounted read-only at /data."
    )
    train_files: list[RelPath] = Field(
        min_length=1,
        max_length=64,
        description="Training files relative to the claim's root. .jsonl files are converted to parquet by "
        "the trainer; .parquet files are used as they are.",
    )
    val_files: list[RelPath] = Field(
        default_factory=list,
        max_length=64,
        description="Optional validation files. Validation is off by default; when empty the trainer "
        "generates a one-row file because verl still reads data.val_files.",
    )
    prompt_key: str = Field(
        default="prompt",
        min_length=1,
        max_length=128,
        description="Column holding the prompt (verl data.prompt_key).",
    )
    max_prompt_length: int = Field(
        default=512, ge=1, le=131072, description="Maximum prompt tokens (verl data.max_prompt_length)."
    )
    max_response_length: int = Field(
        default=1024,
        ge=1,
        le=131072,
        description="Maximum generated tokens per response (verl data.max_response_length).",
    )
    train_batch_size: int = Field(
        default=256,
        ge=1,
        le=1048576,
        description="Prompts per training step (verl data.train_batch_size); each prompt is sampled "
        "algorithm.groupSize times.",
    )
    oversize: Literal["drop", "refuse"] = Field(
        default="drop",
        description="What the trainer does with prompts longer than maxPromptLength tokens: drop them "
        "(logged with a count) or refuse to start.",
    )


class TrainingSpec(ApiModel):
    """How long to train: exactly one of totalSteps or epochs."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.totalSteps) != has(self.epochs)",
                "spec.training needs exactly one of totalSteps or epochs; set one and remove the other",
            )
        )
    )

    total_steps: int | None = Field(
        default=None, ge=1, le=10_000_000, description="Training steps (verl trainer.total_training_steps)."
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Passes over the training data (verl trainer.total_epochs).",
    )


class KLLoss(ApiModel):
    """KL divergence to the reference policy, added to the actor loss (GRPO's usual choice)."""

    enabled: bool = Field(default=True, description="Add the KL loss (verl actor.use_kl_loss).")
    coef: float = Field(default=0.001, ge=0, le=10, description="KL loss weight (verl actor.kl_loss_coef).")
    type: Literal["kl", "abs", "mse", "low_var_kl", "full"] = Field(
        default="low_var_kl", description="KL estimator (verl actor.kl_loss_type)."
    )


class AlgorithmSpec(ApiModel):
    """GRPO settings."""

    adv_estimator: Literal["grpo", "rloo", "reinforce_plus_plus", "remax", "opo", "grpo_passk"] = Field(
        default="grpo", description="Advantage estimator (verl algorithm.adv_estimator)."
    )
    group_size: int = Field(
        default=8,
        ge=2,
        le=1024,
        description="Responses sampled per prompt; GRPO normalises rewards within each group "
        "(verl actor_rollout_ref.rollout.n).",
    )
    kl_loss: KLLoss = Field(default_factory=KLLoss, description="KL loss to the reference policy.")
    mini_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=1048576,
        description="Prompts per policy update (verl actor.ppo_mini_batch_size). Defaults to "
        "data.trainBatchSize: one on-policy update per step. Must not exceed data.trainBatchSize.",
    )
    micro_batch_size_per_gpu: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        alias="microBatchSizePerGPU",
        description="Sequences per forward/backward pass on one GPU (verl actor.ppo_micro_batch_size_per_gpu "
        "and the log-prob micro batches of actor and reference). Empty: the preflight sizes the micro batches "
        "(or, with packed sequences, token budgets) for the model, lengths and GPU memory, 4 where it cannot "
        "(docs/preflight.md, \"Sizing\"). Lower it when a GPU runs out of memory.",
    )
    learning_rate: float = Field(default=1e-6, gt=0, le=1, description="Actor learning rate (verl actor.optim.lr).")


class RolloutSpec(ApiModel):
    """The generation engine that samples responses."""

    engine: Literal["vllm"] = Field(
        default="vllm",
        description="Inference engine (verl actor_rollout_ref.rollout.name). The trainer image ships vLLM.",
    )
    tensor_parallel_size: int = Field(
        default=2,
        ge=1,
        le=64,
        description="GPUs per vLLM engine (verl rollout.tensor_model_parallel_size). Must divide the GPUs "
        "per pod of the role that runs the rollout (rollout in disaggregated mode, actor in colocated).",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Fraction of GPU memory vLLM may take (verl rollout.gpu_memory_utilization). Empty: the "
        "preflight sizes it to hold every sequence of a step beside what stays on the GPU, 0.7 where it cannot.",
    )
    temperature: float = Field(default=0.7, ge=0, le=10, description="Sampling temperature.")
    top_p: float = Field(default=0.9, gt=0, le=1, description="Nucleus sampling top_p.")
    chunked_prefill: bool = Field(
        default=True, description="vLLM chunked prefill (verl rollout.enable_chunked_prefill)."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1048576,
        description="vLLM max_num_batched_tokens (verl rollout.max_num_batched_tokens). Empty: the preflight "
        "sizes it for a step's prompts, 16384 where it cannot.",
    )
    max_model_len_factor: float = Field(
        default=1.2,
        ge=1,
        le=8,
        description="vLLM max_model_len = (maxPromptLength + maxResponseLength) x this factor, clamped "
        "by the "
        "trainer to the model's max_position_embeddings with a warning.",
    )


class RewardFunction(ApiModel):
    """A Python reward function from a ConfigMap in the job's namespace."""

    config_map_name: Name = Field(description="ConfigMap holding the Python file; mounted at /etc/grpo/reward/.")
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key of the ConfigMap whose value is the Python file, e.g. reward.py.",
    )
    name: str = Field(
        default="compute_score",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Function to call, with verl's compute_score(data_source, solution_str, ground_truth, "
        "extra_info) signature (verl reward.custom_reward_function.name).",
    )


class RewardSpec(ApiModel):
    """How responses are scored."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type != 'function' || has(self.function)",
                "reward.type=function needs reward.function {configMapName, key, name}; add it or choose "
                "another reward.type",
            ),
            cel(
                "self.type != 'model' || has(self.model)",
                "reward.type=model needs reward.model {claimName, path}; add it or choose another reward.type",
            ),
            cel(
                "self.type == 'function' || !has(self.function)",
                "reward.function is only read when reward.type=function; remove reward.function or set "
                "reward.type=function",
            ),
            cel(
                "self.type == 'model' || !has(self.model)",
                "reward.model is only read when reward.type=model; remove reward.model or set reward.type=model",
            ),
        )
    )

    type: Literal["length", "function", "model"] = Field(
        default="length",
        description="length: the trainer's built-in response-length reward (runs on CPU). function: a Python "
        "function from a ConfigMap (runs on CPU). model: a reward model served on GPUs.",
    )
    function: RewardFunction | None = Field(
        default=None, description="The reward function; required when type is function."
    )
    model: ModelSource | None = Field(
        default=None,
        description="The reward model; required when type is model. Mounted at /models when on the policy "
        "model's claim, else at /reward-models.",
    )
