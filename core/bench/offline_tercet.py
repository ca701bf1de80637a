"""tercet's engine driven in-process: the real Scheduler, its loop body, and no peers.

The :class:`~tercet.scheduler.scheduler.Scheduler` is built exactly as the
scheduler process builds it (:func:`~tercet.scheduler.assembly.build_scheduler`
with a ``ProcessContext``, a ``ModelRunner``, the tokenizer, ``PortArgs`` for
ipc endpoints in a private temp directory). Its
sockets are bound and connected but no process is ever on the other end:
requests go straight to its dispatcher, and its sender to the detokenizer is
swapped for :class:`CollectingSender`, which keeps each step's
``BatchTokenIDOutput`` instead of serializing it. What runs per step is what
``Scheduler.run_forever`` runs: ``receive_and_dispatch`` (finding nothing
queued) and ``run_step`` (admission, one model step with sampling and stop
checks, building the step's output message). Settings are tercet's defaults
(``TERCET_*`` variables are ignored, for reproducible runs) except the KV pool
and the batch cap, sized so the whole batch runs at once without retraction.
"""

from __future__ import annotations

import time

from tercet.bench.offline_metrics import Progress, TokenTimeline
from tercet.ipc.messages import TokenizedGenerateReq
from tercet.sampling_params import SamplingParams


class CollectingSender:
    """Stands in for the scheduler's sender to the detokenizer: outputs stay in process."""

    def __init__(self, on_output):
        self.on_output = on_output

    def send(self, message) -> None:
        self.on_output(message, time.perf_counter())

    def close(self) -> None:
        pass


class TercetOfflineEngine:
    def __init__(self, model_path, dtype: str, device: str, max_batch_size: int, max_tokens_per_request: int):
        from tercet.config import load_config
        from tercet.ipc.port_args import PortArgs
        from tercet.processes.context import ProcessContext
        from tercet.scheduler.assembly import build_scheduler
        from tercet.scheduler.process import build_model_runner
        from tercet.tokenizer.loading import load_tokenizer

        defaults = load_config(environ={})
        page_size = defaults.cache.page_size
        # Room for every request's whole sequence plus a page of headroom each:
        # the benchmark measures steps, never retraction.
        pages_per_request = -(-max_tokens_per_request // page_size) + 1
        max_total_tokens = max_batch_size * pages_per_request * page_size
        self.config = load_config(environ={}, overrides={
            "model": {"path": str(model_path), "dtype": dtype, "device": device},
            "cache": {"max_total_tokens": max_total_tokens},
            "scheduler": {"max_running_requests": max(max_batch_size, defaults.scheduler.max_running_requests)},
        })
        config = self.config
        context = ProcessContext.create(config)
        self.port_args = PortArgs.create(context.create_transport())
        try:
            self.model_runner = build_model_runner(context)
            tokenizer = load_tokenizer(config.model.path)
            self.scheduler = build_scheduler(context, self.port_args, self.model_runner, tokenizer)
        except BaseException:
            self.port_args.remove_runtime_dir()
            raise
        self.scheduler.sender_to_detokenizer.close()
        self.scheduler.sender_to_detokenizer = CollectingSender(self._on_output)
        self._timeline: TokenTimeline | None = None
        self._request_of_rid: dict[str, int] = {}

    @property
    def dtype(self) -> str:
        return str(self.model_runner.dtype).removeprefix("torch.")

    @property
    def device(self) -> str:
        return str(self.model_runner.device)

    def _on_output(self, message, now: float) -> None:
        for rid, new_token_ids in zip(message.rids, message.new_token_ids):
            self._timeline.record(self._request_of_rid[rid], new_token_ids, now)

    def generate(self, prompts: list[list[int]], output_len: int, progress: Progress, label: str = "tercet") -> TokenTimeline:
        """Greedy, EOS ignored, ``output_len`` new tokens for every prompt; all submitted at once."""
        import torch

        scheduler = self.scheduler
        params = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True, seed=0)
        timeline = self._timeline = TokenTimeline(len(prompts))
        self._request_of_rid = {f"bench-{index}": index for index in range(len(prompts))}
        num_steps = 0
        is_prefill_done = False
        timeline.started = time.perf_counter()
        for rid, index in self._request_of_rid.items():
            scheduler.io.dispatcher(TokenizedGenerateReq(rid, prompts[index], params))
        while scheduler.queues.has_requests:
            scheduler.receive_and_dispatch(block=False)
            scheduler.run_step()
            num_steps += 1
            if is_prefill_done:
                timeline.num_decode_steps += 1
                progress.every(f"{label}: decode step {timeline.num_decode_steps}/{output_len - 1}")
            elif timeline.all_have_first_token:
                is_prefill_done = True
                progress(f"{label}: prefill done in {num_steps} step(s), "
                         f"{time.perf_counter() - timeline.started:.2f}s")
        if self.model_runner.device.type == "cuda":
            torch.cuda.synchronize()
        timeline.ended = time.perf_counter()
        return timeline

    @property
    def num_retractions(self) -> int:
        return self.scheduler.queues.num_retractions

    def forget_cached_prompts(self) -> None:
        """Empty the prefix cache, so a warm-up's prompts cannot speed up the measured run."""
        if self.scheduler.prefix_cache is not None:
            self.scheduler.prefix_cache.clear()

    def close(self) -> None:
        self.scheduler.close()
        self.port_args.remove_runtime_dir()
