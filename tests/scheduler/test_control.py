from tercet.ipc.control_messages import AbortRequestsReq
from tercet.sampling_params import SamplingParams


def test_abort_requests_ends_each_id_and_its_completions_and_nothing_else(harness):
    harness.scheduler.queues.pause()  # nothing runs: all stay waiting
    harness.submit("w2:a", [1, 2, 3], SamplingParams(max_new_tokens=4, temperature=0.0, ignore_eos=True, n=2))
    harness.submit("w2:ab", [1, 2, 3])
    harness.submit("w1:a", [1, 2, 3])
    reply = harness.control(AbortRequestsReq("ask", rids=["w2:a", "w3:gone"]))
    assert reply.ok and reply.data == {"num_aborted": 2}
    waiting = [req.rid for leader in harness.scheduler.queues.waiting for req in leader.group]
    assert waiting == ["w2:ab", "w1:a"]
