"""The baseline: plain Hugging Face transformers forwards, greedy, with its own KV cache.

No ``generate()``: one prefill forward over the whole ``[B, L]`` batch (every
prompt has the same length, so there is no padding and no attention mask),
then one forward per new token with ``past_key_values``, taking the argmax of
the last position. ``logits_to_keep=1`` computes only the last position's
logits, as ``generate()`` does and as tercet does. Each step's tokens are
copied to the host, as a server streaming them would have to.
"""

from __future__ import annotations

import inspect
import time

from tercet.bench.offline_metrics import Progress, TokenTimeline


class TransformersBaseline:
    def __init__(self, model_path, torch_dtype, device):
        from transformers import AutoModelForCausalLM

        self.device = device
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch_dtype).to(device)
        self.model.eval().requires_grad_(False)
        # Names changed across transformers versions: ``past_key_values`` (argument and
        # output) became ``cache`` in 5.x, ``num_logits_to_keep`` became ``logits_to_keep``.
        parameters = inspect.signature(self.model.forward).parameters
        self.cache_name = "cache" if "cache" in parameters else "past_key_values"
        self.last_logits_only = {"logits_to_keep" if "logits_to_keep" in parameters else "num_logits_to_keep": 1}

    def generate(self, prompts: list[list[int]], output_len: int, progress: Progress, label: str = "transformers") -> TokenTimeline:
        import torch

        if len({len(prompt) for prompt in prompts}) != 1:
            raise ValueError("the transformers baseline needs prompts of one length (no padding)")
        timeline = TokenTimeline(len(prompts))
        input_ids = torch.tensor(prompts, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            timeline.started = time.perf_counter()
            out = self.model(input_ids=input_ids, use_cache=True, **self.last_logits_only)
            next_ids = out.logits[:, -1, :].argmax(dim=-1)
            self._record(timeline, next_ids)
            progress(f"{label}: prefill done, {time.perf_counter() - timeline.started:.2f}s")
            for step in range(1, output_len):
                out = self.model(
                    input_ids=next_ids.unsqueeze(1), use_cache=True, **self.last_logits_only,
                    **{self.cache_name: getattr(out, self.cache_name)},
                )
                next_ids = out.logits[:, -1, :].argmax(dim=-1)
                self._record(timeline, next_ids)
                timeline.num_decode_steps += 1
                progress.every(f"{label}: decode step {step}/{output_len - 1}")
            timeline.ended = time.perf_counter()
        return timeline

    @staticmethod
    def _record(timeline: TokenTimeline, next_ids) -> None:
        token_ids = next_ids.tolist()  # waits for the device, like a host that streams tokens
        now = time.perf_counter()
        for request, token_id in enumerate(token_ids):
            timeline.record(request, [token_id], now)

    def close(self) -> None:
        del self.model
