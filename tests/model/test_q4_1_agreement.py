"""The default model served from its Q4_1 blocks against the same weights dequantized to float32.

Measured here (SmolLM2-135M-Instruct, 300 positions of this project's README):
with bfloat16 activations through the int4 kernels, greedy top-1 agrees at
95.3% of the positions and the largest log-probability difference at the
text's own tokens is 0.30 (the dense bfloat16 copy that large batches use
gives about the same); on the block kernel, which also quantizes the
activations to int8 a block, 95.3% and 0.81; with float32 activations the
int4 kernel path equals the dequantized reference to 1e-4, and the block
kernel (float32 rows quantized to int8 a block as bfloat16's are, the sums kept
in float32) agrees at 95.7% with a largest difference of 0.39 (Zen 4). The
bounds below leave room for the arithmetic of other CPUs, not for a wrong kernel (a wrong scale or zero
drops agreement far below them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tercet.formats.default_model import find_default_gguf
from tercet.model.model_runner import ModelRunner
from tercet.native.cpu import runnable_levels, use_level
from tercet.native.levels import LEVELS
from tercet.plugins.linear_layers.block_matmul import KernelBlockLinear, load_block_matmul
from tercet.plugins.paged_cpu_attention.build import takes_bf16_dot_products
from tercet.testing.paged_greedy import PagedGreedyDriver
from tercet.testing.runner_factory import model_runner_for
from tercet.tokenizer.loading import load_tokenizer

NUM_POSITIONS = 300
MIN_TOP1_AGREEMENT = 0.90
MAX_LOGPROB_DIFFERENCE = 1.0
FLOAT32_POSITIONS = 24
FLOAT32_TOLERANCE = 1e-3
DECODED_TOKENS = 24
# Prompt logits' top-1 agreement, over 64 positions, between attention on bfloat16 dot products and on
# float32 ones (measured 0.906 on Zen 4: bfloat16 logits tie, and a tie's winner flips at any change; each
# agrees with the float32 dequantized weights as the other does, the test above).
CROSS_ARITHMETIC_TOP1 = 0.85


def _runner(quantization: str, dtype: str, dense_from_rows: int = 0, native_kernels: bool = False) -> ModelRunner:
    # dense_from_rows=0 unless asked: a 300-token prompt would otherwise run on the dense copy.
    return model_runner_for(
        find_default_gguf(), dtype=dtype, device="cpu", quantization=quantization, max_total_tokens=512,
        page_size=16, max_running_requests=2, dense_from_rows=dense_from_rows, native_kernels=native_kernels,
    )


def _logprobs(runner: ModelRunner, token_ids: list[int]) -> torch.Tensor:
    row = runner.req_to_token_pool.alloc()
    runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(-(-len(token_ids) // 16)), 16)
    _, full = runner.forward_with_prompt_logits(runner.build_batch([row], [0], [token_ids]), [0])
    return torch.log_softmax(full[0].float(), dim=-1)


@pytest.fixture(scope="module")
def text_ids() -> list[int]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    token_ids = load_tokenizer(str(find_default_gguf())).encode(readme)[:NUM_POSITIONS]
    assert len(token_ids) == NUM_POSITIONS
    return token_ids


@pytest.fixture(scope="module")
def reference(text_ids) -> torch.Tensor:
    return _logprobs(_runner("none", "float32"), text_ids)


# The block kernel at each level this CPU runs (every level computes the same bits, see below), and torch's.
PATHS = {
    **{f"block kernel at {level.name}": dict(native_kernels=True, level=level.name) for level in LEVELS},
    "block kernel, float32 activations": dict(native_kernels=True, dtype="float32"),
    "torch's int4 kernels": dict(dense_from_rows=0),
    "dense copy for many rows": dict(dense_from_rows=8),
}


@pytest.fixture
def at_level():
    """Runs the test's kernels at a forced instruction-set level, the CPU's best again after it."""
    def force(name: str) -> None:
        if name not in [level.name for level in runnable_levels()]:
            pytest.skip(f"this CPU does not run level {name}")
        use_level(name)
        if load_block_matmul() is None:
            pytest.skip(f"the block kernel has no vector code at level {name}: torch's kernels run there")
    yield force
    use_level("auto")


@pytest.mark.parametrize("path", PATHS)
def test_served_q4_1_agrees_with_the_dequantized_weights(text_ids, reference, path, at_level):
    options = dict(PATHS[path])
    if "level" in options:
        at_level(options.pop("level"))
    dtype = options.pop("dtype", "auto")
    if dtype == "float32" and load_block_matmul() is None:
        pytest.skip("the block kernel does not run on this CPU")
    runner = _runner("auto", dtype, **options)
    assert runner.dtype == (torch.float32 if dtype == "float32" else torch.bfloat16)
    on_block_kernel = isinstance(runner.model.model.layers[0].mlp.down_proj, KernelBlockLinear)
    assert on_block_kernel == options.get("native_kernels", False)
    assert runner.load_report.layers_by_method == {"q4_1": 120, "q8_0": 1}
    served = _logprobs(runner, text_ids)
    agreement = (served.argmax(-1) == reference.argmax(-1)).float().mean().item()
    following = torch.tensor(text_ids[1:])[:, None]
    difference = (served[:-1].gather(1, following) - reference[:-1].gather(1, following)).abs().max().item()
    print(f"{path}: top-1 agreement {agreement:.3f}, largest log-probability difference {difference:.3f}")
    assert agreement >= MIN_TOP1_AGREEMENT, f"top-1 agreement {agreement:.3f}"
    assert difference <= MAX_LOGPROB_DIFFERENCE, f"largest log-probability difference {difference:.3f}"


def test_every_level_gives_the_same_bits(text_ids, at_level):
    """The default model's prompt logits on the block kernel (and the fused steps built at the same level)
    are the same bits at every level this CPU runs, and so are the tokens of a batch decoded greedily (the
    decode attention and the one-call layer runner at that level too). The exception is the attention over
    the bfloat16 cache at a level with AVX512-BF16, on its bfloat16 dot products: those levels give each
    other's bits, and the float32 levels' top-1 tokens at CROSS_ARITHMETIC_TOP1 of the positions or more."""
    logits, decoded = {}, {}
    for level in runnable_levels():
        use_level(level.name)
        if load_block_matmul() is None:
            continue
        logits[level] = _logprobs(_runner("auto", "auto", native_kernels=True), text_ids[:64])
        driver = PagedGreedyDriver(_runner("auto", "auto", native_kernels=True))
        sequences = [driver.start(text_ids[:40]), driver.start(text_ids[100:117])]
        for _ in range(DECODED_TOKENS + 1):
            driver.step(None, *sequences)
        decoded[level] = [sequence.output_ids for sequence in sequences]
    use_level("auto")
    if len(logits) < 2:
        pytest.skip(f"this CPU runs the block kernel at one level only ({', '.join(level.name for level in logits)})")
    families = [[level for level in logits if takes_bf16_dot_products(level) == dots] for dots in (False, True)]
    for family in families:
        for level in family[1:]:
            assert torch.equal(logits[level], logits[family[0]]), f"level {level.name} differs from {family[0].name}"
            assert decoded[level] == decoded[family[0]], f"level {level.name} decodes other tokens than {family[0].name}"
    if all(families):
        float32_dots, bf16_dots = logits[families[0][0]], logits[families[1][0]]
        agreement = (bf16_dots.argmax(-1) == float32_dots.argmax(-1)).float().mean().item()
        following = torch.tensor(text_ids[1:64])[:, None]
        difference = (bf16_dots[:-1].gather(1, following) - float32_dots[:-1].gather(1, following)).abs().max().item()
        print(f"bfloat16 against float32 dot products: top-1 agreement {agreement:.3f}, largest log-probability "
              f"difference at the text's tokens {difference:.3f}")
        assert agreement >= CROSS_ARITHMETIC_TOP1, f"top-1 agreement {agreement:.3f}"
        assert difference <= MAX_LOGPROB_DIFFERENCE, f"largest log-probability difference {difference:.3f}"
