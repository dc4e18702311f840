"""A tiny Qwen2-architecture model and prompt set, built locally: nothing is downloaded.

- tokenizer: byte-level BPE trained with `tokenizers` on generated text, saved with a ChatML chat
  template (the Qwen2 one) and the special tokens <|endoftext|>, <|im_start|>, <|im_end|>;
- model: transformers' Qwen2Config (2 layers, hidden 128, 2 heads of 64, 1 KV head), random init;
- reward model: the same shape as Qwen2ForSequenceClassification with one label (its score head gives
  one number per sequence, what verl's reward loop reads from vLLM's /classify), random init;
- prompts: a JSONL file in the shape grpo_trainer's data prep reads.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = [
    "the",
    "a",
    "model",
    "reward",
    "step",
    "policy",
    "token",
    "answer",
    "question",
    "length",
    "short",
    "long",
    "write",
    "explain",
    "list",
    "count",
    "why",
    "how",
    "what",
    "number",
    "story",
    "poem",
    "sentence",
    "word",
    "cat",
    "dog",
    "tree",
    "river",
    "stone",
    "light",
    "sound",
    "color",
    "red",
    "blue",
    "green",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "please",
    "about",
    "describe",
    "give",
    "tell",
    "me",
    "you",
]


@dataclass(frozen=True)
class TinyModelSpec:
    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    max_position_embeddings: int = 512
    seed: int = 0


def generated_sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))).capitalize() + "." for _ in range(n)]


def build_tokenizer(vocab_size: int, seed: int = 0):  # -> transformers.PreTrainedTokenizerFast
    """Byte-level BPE trained on generated text, with Qwen2's chat template and special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generated_sentences(4000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _config(spec: TinyModelSpec, tokenizer, **extra):  # -> transformers.Qwen2Config
    from transformers import Qwen2Config

    eos, pad = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="bfloat16",
        **extra,
    )


def build_model_dir(target: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Save tokenizer, config, generation config and random bf16 weights of a tiny Qwen2 model."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.vocab_size, spec.seed)
    tokenizer.save_pretrained(target)
    config = _config(spec, tokenizer)
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(target)
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    ).save_pretrained(target)
    return target


def build_reward_model_dir(target: Path, spec: TinyModelSpec = TinyModelSpec(seed=1)) -> Path:
    """Save tokenizer, config and random bf16 weights of a tiny Qwen2ForSequenceClassification (1 label)."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    target.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.vocab_size, seed=0)  # the policy's tokenizer: same text, same tokens
    tokenizer.save_pretrained(target)
    config = _config(spec, tokenizer, num_labels=1)
    torch.manual_seed(spec.seed)
    model = Qwen2ForSequenceClassification(config).to(torch.bfloat16)
    model.save_pretrained(target)
    return target


def write_prompts(path: Path, n: int, seed: int = 1) -> Path:
    """n JSONL rows {"prompt": str, "data_source": "tiny"} (short, well under 64 prompt tokens)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(n):
            topic = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
            f.write(json.dumps({"prompt": f"Write about {topic}.", "data_source": "tiny", "extra_info": {"i": i}}))
            f.write("\n")
    return path
