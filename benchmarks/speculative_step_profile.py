"""Where a speculative step goes at c=1: drafting, verifying, and the host work between.

Drives the default model through tercet's scheduler in process, one request
at a time (greedy, EOS ignored), and times each part of each step:

- ``draft``: the proposer's ``propose`` (for ``self_quantized``: the catch-up
  forward plus ``k - 1`` decode forwards of the Q4_1 draft model);
- ``verify``: the target's forward over the last token plus the drafts;
- ``host``: the rest of the step (planning, sampling the ``k + 1`` rows,
  accepting, bookkeeping);

and, on the same weights and prompts, a plain step of the served Q4_1 model
and of the float32 model (speculation off), so the parts read against a
plain step. It also prints the acceptance rate, the mean accepted length and
the ITL the parts make. Run on an otherwise idle machine:

    python benchmarks/speculative_step_profile.py [--k 2 3 4 6] [--output-len 128]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from tercet.bench.offline_tercet import CollectingSender
from tercet.formats.default_model import find_default_gguf
from tercet.ipc.messages import TokenizedGenerateReq
from tercet.sampling_params import SamplingParams

F32 = {"quantization": "none", "dtype": "float32"}


def scheduler_on_default_model(model: dict, speculative: dict):
    from tercet.config import load_config
    from tercet.ipc.port_args import PortArgs
    from tercet.processes.context import ProcessContext
    from tercet.scheduler.assembly import build_scheduler
    from tercet.scheduler.process import build_model_runner
    from tercet.tokenizer.loading import load_tokenizer

    config = load_config(environ={}, overrides={
        "model": {"path": str(find_default_gguf()), "device": "cpu", **model},
        "cache": {"max_total_tokens": 4096}, "speculative": speculative,
    })
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    runner = build_model_runner(context)
    scheduler = build_scheduler(context, port_args, runner, load_tokenizer(config.model.path))
    scheduler.sender_to_detokenizer.close()
    scheduler.sender_to_detokenizer = CollectingSender(lambda message, now: None)
    return scheduler, port_args


class Timings:
    """Seconds per part, per step; wraps the proposer's propose and the runner's forwards."""

    def __init__(self, scheduler):
        self.parts: dict[str, float] = defaultdict(float)
        self.recording = False
        step = scheduler.model_step
        self._wrap(step.model_runner, "forward", "verify")
        self._wrap(step.model_runner, "forward_with_prompt_logits", "verify")
        if step.speculation is not None:
            self._wrap(step.speculation.proposer, "propose", "draft")

    def _wrap(self, owner, name: str, part: str) -> None:
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if self.recording:
                    self.parts[part] += time.perf_counter() - started

        setattr(owner, name, timed)


def run_one(scheduler, timings: Timings, prompt: list[int], output_len: int, rid: str) -> tuple[list[float], list[dict], int]:
    """Per decode step: (step seconds, its parts), and the output tokens of those steps."""
    params = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True)
    scheduler.io.dispatcher(TokenizedGenerateReq(rid, prompt, params))
    queues = scheduler.queues
    while queues.waiting or any(req.is_prefilling for req in queues.running):
        scheduler.run_step()
    req = queues.running[0]
    first = len(req.output_ids)
    steps, parts = [], []
    while queues.running:
        timings.parts.clear()
        timings.recording = True
        started = time.perf_counter()
        scheduler.run_step()
        steps.append(time.perf_counter() - started)
        timings.recording = False
        parts.append(dict(timings.parts))
    return steps, parts, len(req.output_ids) - first


class Engine:
    """A scheduler in process with its part timings; speculation's k settable between requests."""

    def __init__(self, model: dict, speculative: dict):
        self.scheduler, self.port_args = scheduler_on_default_model(model, speculative)
        self.timings = Timings(self.scheduler)
        self.speculation = self.scheduler.model_step.speculation

    def run(self, prompt: list[int], output_len: int, rid: str, k: int | None, into: dict) -> None:
        if k is not None:
            self.speculation.k = k
        before = self.speculation.stats if self.speculation is not None else None
        steps, parts, tokens = run_one(self.scheduler, self.timings, prompt, output_len, rid)
        into["steps"] = into.get("steps", 0) + len(steps)
        into["seconds"] = into.get("seconds", 0.0) + sum(steps)
        into["tokens"] = into.get("tokens", 0) + tokens
        for part in parts:
            for key, seconds in part.items():
                into[key] = into.get(key, 0.0) + seconds
        if before is not None:
            after = self.speculation.stats
            for key in ("num_verifications", "num_draft_tokens", "num_accepted_tokens"):
                into[key] = into.get(key, 0) + getattr(after, key) - getattr(before, key)

    def close(self) -> None:
        self.scheduler.close()
        self.port_args.remove_runtime_dir()


def summary(name: str, totals: dict) -> dict:
    steps = totals["steps"]
    result = {"name": name, "itl_ms": totals["seconds"] / totals["tokens"] * 1e3,
              "step_ms": totals["seconds"] / steps * 1e3}
    for key in ("draft", "verify"):
        result[f"{key}_ms"] = totals.get(key, 0.0) / steps * 1e3
    result["host_ms"] = result["step_ms"] - result["draft_ms"] - result["verify_ms"]
    if totals.get("num_draft_tokens"):
        result["acceptance"] = totals["num_accepted_tokens"] / totals["num_draft_tokens"]
        result["accepted_per_verification"] = totals["num_accepted_tokens"] / totals["num_verifications"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4])
    parser.add_argument("--output-len", type=int, default=96)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--skip-f32", action="store_true", help="leave out the plain float32 run")
    arguments = parser.parse_args()
    generator = random.Random(0)
    prompts = [[generator.randrange(100, 40000) for _ in range(arguments.prompt_len)]
               for _ in range(arguments.prompts)]
    engines = {"q4_1 plain": Engine({}, {})}
    if not arguments.skip_f32:
        engines["f32 plain"] = Engine(F32, {})
    engines["self_quantized"] = Engine(F32, {"proposer": "self_quantized"})
    # Each prompt goes through every run in turn, so a busy moment falls on all of them.
    runs = [(name, None) for name in engines if name != "self_quantized"]
    runs += [(f"self_quantized k={k}", k) for k in arguments.k]
    totals = {name: {} for name, _ in runs}
    try:
        for engine in engines.values():
            engine.run(prompts[0][:16], 8, "warm", None, {})
        for index, prompt in enumerate(prompts):
            for name, k in runs:
                engine = engines["self_quantized" if k is not None else name]
                engine.run(prompt, arguments.output_len, f"{name}-{index}", k, totals[name])
    finally:
        for engine in engines.values():
            engine.close()
    results = [summary(name, totals[name]) for name, _ in runs]
    base = results[0]["itl_ms"]
    print(f"{'run':<22} {'ITL ms':>7} {'/Q4_1':>6} {'step ms':>8} {'draft':>7} {'verify':>7} {'host':>6} "
          f"{'accept':>7} {'acc/ver':>7}")
    for result in results:
        print(f"{result['name']:<22} {result['itl_ms']:7.2f} {result['itl_ms'] / base:6.2f} "
              f"{result['step_ms']:8.2f} {result.get('draft_ms', 0):7.2f} {result.get('verify_ms', 0):7.2f} "
              f"{result['host_ms']:6.2f} {result.get('acceptance', 0):7.3f} "
              f"{result.get('accepted_per_verification', 0):7.2f}")


if __name__ == "__main__":
    main()
