import pytest

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.model.tensor_parallel import TensorParallel
from tercet.parallel.topology import scheduler_name
from tercet.sampling_params import SamplingParams
from tercet.scheduler.process import process_title
from tercet.scheduler.tensor_parallel_inbox import TensorParallelInbox, _with_fixed_seed


def test_only_rank_0_receives():
    with pytest.raises(ValueError):
        TensorParallelInbox(TensorParallel(1, 2), receiver=object())
    with pytest.raises(ValueError):
        TensorParallelInbox(TensorParallel(0, 2), receiver=None)


def test_rank_0_draws_the_seed_a_request_left_out():
    unseeded = TokenizedGenerateReq("r", [1, 2], SamplingParams(temperature=1.0))
    seeded = _with_fixed_seed(unseeded)
    assert isinstance(seeded.sampling_params.seed, int) and seeded.rid == "r"
    given = TokenizedGenerateReq("r", [1, 2], SamplingParams(temperature=1.0, seed=5))
    assert _with_fixed_seed(given) is given


def test_process_names_say_the_ranks():
    assert scheduler_name(0, 0, 1, 1) == "scheduler"
    assert scheduler_name(1, 0, 2, 1) == "scheduler-1"
    assert scheduler_name(0, 1, 1, 2) == "scheduler-tp1"
    assert scheduler_name(1, 1, 2, 2) == "scheduler-1-tp1"
    assert process_title(1, 0) == "tercet scheduler dp1 tp0"
