"""Servers with their kernels forced to the AVX2 level (``model.cpu_isa = "avx2"``): the lane that runs an
AVX2-only machine's code on any x86 machine that has AVX2, and the refusal of a level the CPU lacks.

The default model on its Q4_1 blocks, with the activations quantized to int8 a block as llama.cpp's do,
answers "What is the capital of France?" with "L'Étoile, la Marseillaise…" at every level, as llama-server
on the same file does (measured on an AVX2 build); the same weights with exact activations (dense float32,
or torch's int4 kernels) answer "The capital of France is Paris." What the AVX2 level must give is what the
CPU's best level of the same arithmetic gives: the same tokens, and Paris from the float32 model."""

import httpx
import openai
import pytest

from tercet.native.cpu import runnable_levels
from tercet.native.levels import LEVELS
from tercet.plugins.paged_cpu_attention.build import takes_bf16_dot_products

pytestmark = pytest.mark.real_model

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def avx2_server(start_server):
    if "avx2" not in [level.name for level in runnable_levels()]:
        pytest.skip("this CPU has no AVX2: the avx2 level cannot run here")
    return start_server(None, ["scheduler.max_running_requests=4", "model.cpu_isa=avx2"])


def test_the_server_reports_the_forced_level(avx2_server):
    info = httpx.get(avx2_server.base_url + "/get_server_info", timeout=60).json()
    weights = info["ranks"][0]["weights"]
    assert weights["cpu_isa"]["level"] == "avx2"
    assert weights["cpu_isa"]["forced"] is True
    assert "avx2" in weights["cpu_isa"]["cpu_runs"]
    assert weights["layers_by_method"] == {"q4_1": 120, "q8_0": 1}
    assert "native kernels at avx2" in avx2_server.log()
    assert "GGUF block weights run on the block kernel at level avx2" in avx2_server.log()


def _answer(server, max_tokens: int = 40) -> str:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=QUESTION, temperature=0,
                                           max_tokens=max_tokens)
    return reply.choices[0].message.content


def test_the_avx2_level_answers_as_the_cpus_best_level_does(avx2_server, start_server):
    """The best level of the same arithmetic: at avx512 and amx the attention over the bfloat16 cache runs on
    bfloat16 dot products, whose bits differ (docs/configuration.md, `cpu_isa`)."""
    best = [level for level in runnable_levels() if not takes_bf16_dot_products(level)][-1]
    reference = start_server(None, ["scheduler.max_running_requests=4", f"model.cpu_isa={best.name}"])
    assert _answer(avx2_server) == _answer(reference)


def test_the_float32_model_at_the_avx2_level_answers_paris(start_server):
    if "avx2" not in [level.name for level in runnable_levels()]:
        pytest.skip("this CPU has no AVX2: the avx2 level cannot run here")
    server = start_server(None, ["model.cpu_isa=avx2", "model.quantization=none", "model.dtype=float32",
                                 "cache.max_total_tokens=4096"])
    assert "Paris" in _answer(server)


def test_a_level_this_cpu_lacks_fails_the_start_naming_it(tercet_start_server):
    lacking = next(level for level in LEVELS if level not in runnable_levels())
    with pytest.raises(RuntimeError) as failure:
        tercet_start_server(None, [f"model.cpu_isa={lacking.name}"])
    assert f"model.cpu_isa: instruction-set level {lacking.name!r} cannot run here" in str(failure.value)
