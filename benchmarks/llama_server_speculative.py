"""llama-server's own speculative options on the copy-heavy workload at c=1.

Starts ``llama-server`` (``--binary``) on the default model's Q4_1 GGUF once per
configuration, one after the other, and sends the copy-heavy prompts of
``speculative_decoding.py`` one at a time to ``/completion`` (token ids in,
greedy, ``cache_prompt``). The effective ITL is measured as there: each
request's time less that of the same prompt asked for one token, over its
output tokens less one. Configurations:

- ``plain``: no speculation;
- ``draft-self``: ``-md`` with the same GGUF as draft (a self-draft accepts
  every token, so this measures the mechanism's cost, not a gain);
- ``ngram-simple``: ``--spec-type ngram-simple`` (prompt lookup, no weights).

Prints each one's ITL, its ratio to ``plain``, whether its outputs equal
``plain``'s, and llama-server's draft counts where its reply has them.

    python benchmarks/llama_server_speculative.py --binary PATH/llama-server [--requests 8]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import httpx

from speculative_decoding import copy_prompts
from tercet.formats.default_model import find_default_gguf
from tercet.testing.running_server import RunningServer, free_port

CONFIGURATIONS = {
    "plain": [],
    "draft-self": ["-md", "{model}", "--spec-draft-n-max", "4"],
    "ngram-simple": ["--spec-type", "ngram-simple"],
}


def complete(client: httpx.Client, prompt: list[int], n_predict: int) -> dict:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": True,
            "return_tokens": True, "ignore_eos": False}
    response = client.post("/completion", json=body)
    response.raise_for_status()
    return response.json()


def measure(base_url: str, prompts: list[list[int]], output_len: int) -> tuple[float, list, int, int]:
    """Effective ITL (seconds), the outputs, and llama-server's drafted and accepted counts (summed)."""
    gaps, outputs, drafted, accepted = [], [], 0, 0
    with httpx.Client(base_url=base_url, timeout=600) as client:
        for prompt in prompts:
            complete(client, prompt, 1)
            started = time.perf_counter()
            complete(client, prompt, 1)
            first = time.perf_counter() - started
            started = time.perf_counter()
            answer = complete(client, prompt, output_len)
            elapsed = time.perf_counter() - started
            tokens = answer.get("tokens") or []
            outputs.append(tokens)
            timings = answer.get("timings", {})
            drafted += timings.get("draft_n", 0)
            accepted += timings.get("draft_n_accepted", 0)
            if len(tokens) > 1:
                gaps.append((elapsed - first) / (len(tokens) - 1))
    return sum(gaps) / len(gaps), outputs, drafted, accepted


class LlamaServer(RunningServer):
    """llama-server on the model, one slot, 2 threads, with ``extra`` options; waited on and stopped as tercet's."""

    def __init__(self, binary: Path, model: Path, extra: list[str], log_path: Path):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port), "-np", "1",
                   "-t", "2", "-c", "2048", *[part.format(model=model) for part in extra]]
        self.log_file = open(log_path, "w")
        self.process = subprocess.Popen(command, stdout=self.log_file, stderr=subprocess.STDOUT)


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    arguments = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(ensure_dequantized_default_model())
    prompts = copy_prompts(tokenizer, arguments.requests, seed=1)
    model = find_default_gguf()
    results = {}
    for name, extra in CONFIGURATIONS.items():
        log = arguments.log_dir / f"llama-speculative-{name}.log"
        with LlamaServer(arguments.binary, model, extra, log) as server:
            complete(httpx.Client(base_url=server.base_url, timeout=600), list(range(1000, 1032)), 4)  # warm-up
            results[name] = measure(server.base_url, prompts, arguments.output_len)
    plain_itl, plain_outputs = results["plain"][0], results["plain"][1]
    print(f"llama-server, copy-heavy workload, c=1, {arguments.requests} requests:")
    for name, (itl, outputs, drafted, accepted) in results.items():
        drafts = f"{accepted} of {drafted} drafts accepted" if drafted else "no draft counts"
        print(f"  {name:13} ITL {itl * 1e3:6.2f} ms  {itl / plain_itl:5.2f}x plain  "
              f"same output as plain: {outputs == plain_outputs}  {drafts}")


if __name__ == "__main__":
    main()
