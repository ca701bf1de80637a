"""A request's prompts: their ids, the batch limit, and errors named after a prompt."""

from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateRequest
from tercet.frontend.prompt_batch import (
    batch_limit,
    check_batch_size,
    for_prompt,
    prompt_messages,
    prompt_rids,
    tokenize_prompts,
)
from tercet.sampling_params import SamplingParams


def batch(num_prompts: int, n: int = 1, seed: int | None = None) -> GenerateRequest:
    return GenerateRequest(SamplingParams(n=n, seed=seed), prompts=[[1]] * num_prompts, prompt_field="input_ids")


def test_a_single_prompt_keeps_its_rid_and_a_batchs_prompts_get_theirs():
    assert prompt_rids("r", GenerateRequest(SamplingParams(), text="x")) == ["r"]
    assert prompt_rids("r", batch(3)) == ["r#0", "r#1", "r#2"]
    assert prompt_rids("r", batch(1)) == ["r#0"]  # a batch of one is still a batch (a list answer)


def test_the_limit_is_the_smaller_of_the_setting_and_what_the_server_holds():
    assert batch_limit(256, 4104) == 256 and batch_limit(256, 9) == 9
    check_batch_size(batch(4, n=2), 8, 100)
    with pytest.raises(RequestError, match="server.max_prompts_per_request") as refused:
        check_batch_size(batch(5, n=2), 8, 100)
    assert refused.value.param == "input_ids" and "5 prompts × n=2 = 10 completions" in refused.value.message
    with pytest.raises(RequestError, match="scheduler.max_queued_requests"):
        check_batch_size(batch(10), 256, 9)
    check_batch_size(GenerateRequest(SamplingParams(n=16), text="x"), 1, 2)  # one prompt: n's own range bounds it


def test_an_error_for_one_prompt_names_it_and_the_first_bad_prompt_wins():
    error = RequestError("the prompt is empty", "prompt", 400)
    renamed = for_prompt(error, batch(3), 2)
    assert (renamed.message, renamed.param) == ("input_ids[2]: the prompt is empty", "input_ids[2]")
    assert renamed.status_code == 400
    assert for_prompt(error, GenerateRequest(SamplingParams(), text=""), 0) is error

    def tokenize(request):
        if request.input_ids == [9]:
            raise RequestError("too long", "max_tokens")
        return request.input_ids

    request = GenerateRequest(SamplingParams(), prompts=[[1], [9], [9]], prompt_field="input_ids")
    with pytest.raises(RequestError) as refused:
        tokenize_prompts(request, tokenize)
    assert refused.value.param == "input_ids[1]"
    ok = GenerateRequest(SamplingParams(), prompts=[[1], [2, 3]])
    assert tokenize_prompts(ok, tokenize) == [[1], [2, 3]]


def test_each_prompt_draws_its_own_seed_unless_the_client_chose_one():
    drawn = prompt_messages(batch(2), ["r#0", "r#1"], [[1], [1]])
    assert drawn[0].sampling_params.seed is not None and drawn[0].sampling_params.seed != drawn[1].sampling_params.seed
    chosen = prompt_messages(batch(2, seed=7), ["r#0", "r#1"], [[1], [1]])
    assert [message.sampling_params.seed for message in chosen] == [7, 7]
