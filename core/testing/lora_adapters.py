"""Small PEFT LoRA adapters for a checkpoint, made by PEFT itself, and PEFT's own greedy output with one.

Adapters are made with random, non-zero A and B (PEFT's ``init_lora_weights=False``:
a fresh PEFT adapter's B is zero, which would test nothing), from a fixed seed,
so two calls with one seed write the same adapter.
"""

from __future__ import annotations

from pathlib import Path

ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_peft_adapter(model_dir: str | Path, target: str | Path, *, rank: int = 4, alpha: int = 8, seed: int = 0,
                       targets: tuple[str, ...] = ALL_TARGETS, scale: float = 1.0) -> Path:
    """A LoRA adapter of ``model_dir`` saved by PEFT in ``target``; ``scale`` multiplies its random weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), init_lora_weights=False,
                        lora_dropout=0.0)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_" in name:
                parameter.mul_(scale)
    peft_model.save_pretrained(str(target))
    return Path(target)


def peft_greedy(model_dir: str | Path, adapter_dir: str | Path | None, prompts: list[list[int]],
                max_new_tokens: int) -> list[list[int]]:
    """PEFT's own float32 greedy continuation of each prompt with the adapter (None: the base model)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            input_ids = torch.tensor([prompt])
            generated = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                       do_sample=False, max_new_tokens=max_new_tokens,
                                       pad_token_id=model.config.eos_token_id)
            outputs.append(generated[0, len(prompt):].tolist())
    return outputs
