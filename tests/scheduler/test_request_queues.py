"""RequestQueues: each verb moves requests as the life cycle says, and refuses what it does not allow."""

from __future__ import annotations

import pytest

from tercet.ipc.messages import FinishReason, TokenLogprobs
from tercet.sampling_params import SamplingParams
from tercet.scheduler.req import EmbeddingReq, Req
from tercet.scheduler.request_queues import IllegalTransition, RequestQueues
from tercet.scheduler.request_status import RequestStatus

STOP = FinishReason("stop")
ABORTED = FinishReason("abort", message="aborted")


class RecordingKVMemory:
    """Stands in for RequestKVMemory: the queues only give memory back."""

    def __init__(self):
        self.released = []

    def release(self, req):
        self.released.append(req.rid)
        req.req_pool_index = None


@pytest.fixture
def memory():
    return RecordingKVMemory()


@pytest.fixture
def queues(memory):
    return RequestQueues(memory)


def make_group(rid, size=1, num_prompt_tokens=3, cache_hits=None):
    group = [
        Req(rid if size == 1 else f"{rid}#{index}", list(range(1, num_prompt_tokens + 1)),
            SamplingParams(max_new_tokens=4, n=size), 0)
        for index in range(size)
    ]
    group[0].lead(group[1:])
    group[0].num_prefix_cache_hits = cache_hits
    return group


def statuses(reqs):
    return [req.status for req in reqs]


def running_group(queues, rid, size=1, **options):
    group = make_group(rid, size, **options)
    queues.enqueue(group[0])
    queues.admit(group[0])
    return group


def test_enqueue_puts_the_leader_in_the_queue_and_its_followers_inside_it(queues):
    leader, follower = make_group("g", 2)
    queues.enqueue(leader)
    assert queues.waiting == (leader,) and queues.running == ()
    assert statuses([leader, follower]) == [RequestStatus.WAITING] * 2
    assert queues.num_waiting == 2 and queues.num_in_flight == 2 and queues.has_requests


def test_a_request_is_enqueued_once(queues):
    (req,) = make_group("r")
    queues.enqueue(req)
    with pytest.raises(IllegalTransition, match="WAITING to WAITING"):
        queues.enqueue(req)
    assert queues.waiting == (req,)


def test_a_compiling_request_joins_the_queue_afterwards_and_a_queued_one_cannot_go_back(queues):
    group = make_group("g", 2)
    queues.hold_for_grammar(group)
    assert statuses(group) == [RequestStatus.PENDING_GRAMMAR] * 2 and not queues.has_requests
    queues.enqueue(group[0])
    assert queues.waiting == (group[0],)
    with pytest.raises(IllegalTransition):
        queues.hold_for_grammar(group)


def test_admit_runs_the_group_and_counts_its_first_admission(queues):
    leader, follower = make_group("g", 2, num_prompt_tokens=5, cache_hits=2)
    queues.enqueue(leader)
    queues.admit(leader)
    assert queues.waiting == () and queues.running == (leader, follower)
    assert statuses([leader, follower]) == [RequestStatus.RUNNING] * 2
    assert follower.is_waiting_for_leader  # until the leader's prompt is computed
    assert (queues.num_prompt_tokens_admitted, queues.num_prompt_tokens_from_cache) == (5, 2)


def test_admit_leaves_behind_the_followers_without_room_to_wait_alone(queues):
    leader, seated, left = make_group("g", 3)
    queues.enqueue(leader)
    queues.admit(leader, [left])
    assert queues.running == (leader, seated) and queues.waiting == (left,)
    assert left.status is RequestStatus.WAITING and not left.is_waiting_for_leader
    assert leader.followers == [seated]


def test_only_a_waiting_request_is_admitted(queues):
    (req,) = make_group("r")
    with pytest.raises(IllegalTransition, match="NEW, not WAITING"):
        queues.admit(req)
    queues.enqueue(req)
    queues.admit(req)
    with pytest.raises(IllegalTransition):
        queues.admit(req)
    assert queues.running == (req,)


def test_start_followers_lets_them_go_on_alone(queues):
    leader, first, second = running_group(queues, "g", 3)
    assert queues.start_followers(leader) == [first, second]
    assert not first.is_waiting_for_leader and not second.is_waiting_for_leader and leader.followers == []
    assert queues.running == (leader, first, second)


def test_retract_sends_the_group_back_with_its_memory_freed_and_counts_it(queues, memory):
    leader, follower = running_group(queues, "g", 2, num_prompt_tokens=4)
    leader.output_ids = [7]
    leader.prompt_logprobs = TokenLogprobs([1, 2], [None, -0.5], [None, None])  # part of the prompt only
    queues.retract(leader)
    assert queues.running == () and queues.waiting == (leader,) and leader.followers == [follower]
    assert statuses([leader, follower]) == [RequestStatus.WAITING] * 2
    assert memory.released == ["g#0", "g#1"]
    assert leader.output_ids == [7] and leader.prompt_logprobs is None  # recomputed when it resumes
    assert leader.num_retractions == 1 and queues.num_retractions == 1
    queues.admit(leader)  # a resumed request is not counted as admitted again
    assert queues.num_prompt_tokens_admitted == 4


def test_a_follower_waiting_for_its_leader_is_not_retracted_alone(queues):
    leader, follower = running_group(queues, "g", 2)
    with pytest.raises(IllegalTransition, match="waits for its leader"):
        queues.retract(follower)
    assert queues.running == (leader, follower)


def test_only_a_running_request_is_retracted(queues):
    (req,) = make_group("r")
    queues.enqueue(req)
    with pytest.raises(IllegalTransition):
        queues.retract(req)


def test_finish_ends_a_running_request_once(queues, memory):
    (req,) = running_group(queues, "r")
    queues.finish(req, STOP)
    assert req.is_finished and req.finish_reason == STOP and memory.released == ["r"]
    assert queues.running == () and not queues.has_requests
    with pytest.raises(IllegalTransition, match="FINISHED to FINISHED"):
        queues.finish(req, ABORTED)
    assert req.finish_reason == STOP and queues.take_outputs_to_send() == [req]


def test_finishing_a_waiting_leader_hands_its_place_to_the_next_completion(queues):
    (before,) = make_group("before")
    leader, first, second = make_group("g", 3)
    (after,) = make_group("after")
    for req in (before, leader, after):
        queues.enqueue(req)
    queues.finish(leader, ABORTED)
    assert queues.waiting == (before, first, after) and first.followers == [second]
    assert queues.num_waiting == 4


def test_finishing_a_waiting_follower_takes_it_out_of_its_group(queues):
    leader, follower = make_group("g", 2)
    queues.enqueue(leader)
    queues.finish(follower, ABORTED)
    assert queues.waiting == (leader,) and leader.followers == [] and queues.num_waiting == 1


def test_finishing_a_running_leader_lets_the_next_completion_lead_the_rest(queues):
    leader, first, second = running_group(queues, "g", 3)
    queues.finish(leader, ABORTED)
    assert queues.running == (first, second)
    assert not first.is_waiting_for_leader and second.leader is first


def test_fail_also_ends_the_completions_waiting_on_the_prompt(queues):
    leader, follower = running_group(queues, "g", 2)
    queues.fail(leader, ABORTED)
    assert statuses([leader, follower]) == [RequestStatus.FINISHED] * 2
    assert queues.running == () and queues.take_outputs_to_send() == [follower, leader]


def test_abort_finds_a_completion_wherever_it_waits_or_runs(queues):
    (runner,) = running_group(queues, "runner")
    leader, follower = make_group("g", 2)
    queues.enqueue(leader)
    assert queues.abort("g#1", ABORTED) and follower.finish_reason == ABORTED
    assert queues.abort("runner", ABORTED) and runner.is_finished
    assert not queues.abort("nobody", ABORTED) and not queues.abort("runner", ABORTED)
    assert queues.waiting == (leader,) and queues.running == ()


def test_abort_all_ends_every_request_here(queues, memory):
    running = running_group(queues, "run", 2)
    waiting = make_group("wait", 2)
    queues.enqueue(waiting[0])
    victims = queues.abort_all(ABORTED)
    assert victims == [*running, *waiting]
    assert all(req.is_finished and not req.followers and not req.is_waiting_for_leader for req in victims)
    assert not queues.has_requests and sorted(memory.released) == ["run#0", "run#1", "wait#0", "wait#1"]


def test_embedding_inputs_wait_oldest_first_and_leave_as_rows_to_send(queues):
    first, second = EmbeddingReq("e1", [1, 2]), EmbeddingReq("e2", [3])
    queues.enqueue_embedding(first)
    queues.enqueue_embedding(second)
    assert queues.waiting_embeddings == (first, second) and queues.num_waiting_embeddings == 2
    # They are not completions: the generation figures and the flush check do not count them.
    assert queues.num_waiting == 0 and queues.num_in_flight == 0 and not queues.has_requests
    assert queues.take_embeddings(1) == [first] and queues.waiting_embeddings == (second,)
    queues.end_embedding(first, b"vector")
    assert queues.take_embedding_outputs() == [("e1", b"vector", 2, None)]
    assert queues.take_embedding_outputs() == []


def test_abort_finds_a_waiting_embedding_input_and_abort_all_ends_every_one(queues):
    queues.enqueue_embedding(EmbeddingReq("one", [1]))
    queues.enqueue_embedding(EmbeddingReq("two", [1, 2]))
    (runner,) = running_group(queues, "runner")
    assert queues.abort("one", ABORTED) and not queues.abort("one", ABORTED)
    assert [req.rid for req in queues.waiting_embeddings] == ["two"]
    victims = queues.abort_all(ABORTED)
    assert [req.rid for req in victims] == ["runner", "two"] and queues.num_waiting_embeddings == 0
    assert queues.take_embedding_outputs() == [("one", b"", 1, ABORTED), ("two", b"", 2, ABORTED)]


def test_outputs_to_send_are_new_tokens_then_finished_requests_each_once(queues):
    quiet, talking, done = (running_group(queues, rid)[0] for rid in ("quiet", "talking", "done"))
    talking.output_ids = [5]
    queues.finish(done, STOP)
    assert queues.take_outputs_to_send() == [talking, done]
    talking.num_sent_tokens = 1
    assert queues.take_outputs_to_send() == []


def test_a_failure_in_the_output_being_sent_is_not_queued_again(queues):
    (running,) = running_group(queues, "running")
    (finished,) = running_group(queues, "finished")
    queues.finish(finished, STOP)
    queues.take_outputs_to_send()
    queues.fail_in_this_output(running, ABORTED)
    queues.fail_in_this_output(finished, ABORTED)
    assert running.is_finished and running.finish_reason == ABORTED and finished.finish_reason == ABORTED
    assert queues.take_outputs_to_send() == [] and queues.running == ()


def test_pause_and_resume(queues):
    assert not queues.is_paused
    queues.pause()
    assert queues.is_paused
    queues.resume()
    assert not queues.is_paused


def test_the_lists_are_shown_read_only(queues):
    (req,) = running_group(queues, "r")
    with pytest.raises(AttributeError):
        queues.running.append(req)
    with pytest.raises(AttributeError):
        queues.num_retractions = 5


def test_arrival_indexes_count_up():
    queues = RequestQueues(RecordingKVMemory())
    assert [queues.next_arrival_index() for _ in range(3)] == [0, 1, 2]
