from tercet.config import TercetConfig
from tercet.sampling_params import SamplingParams
from tercet.scheduler.policy import SchedulerView
from tercet.scheduler.req import Req
from tercet.plugins.lof_policy import LongestOutputFirst

NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def make_req(rid, arrival_index, max_new_tokens, num_generated=0):
    req = Req(rid, [1, 2, 3], SamplingParams(max_new_tokens=max_new_tokens), arrival_index)
    req.output_ids = [7] * num_generated
    return req


def order(waiting):
    return [req.rid for req in LongestOutputFirst(TercetConfig()).order(waiting, NO_VIEW)]


def test_most_new_tokens_first_ties_by_arrival():
    waiting = [make_req("short", 0, 8), make_req("long", 1, 512), make_req("mid-a", 2, 64), make_req("mid-b", 3, 64)]
    assert order(waiting) == ["long", "mid-a", "mid-b", "short"]


def test_counts_what_is_left_for_a_preempted_request():
    # 100 of 128 already generated: 28 left, fewer than a fresh 64.
    waiting = [make_req("resumed", 0, 128, num_generated=100), make_req("fresh", 1, 64)]
    assert order(waiting) == ["fresh", "resumed"]
