"""The in-process scheduler harness runs a plugin's policy and handlers in a real Scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from tercet.plugin_api import ControlRequest, SamplingParams, SchedulingPolicy, hookimpl


class LastComeFirstServed(SchedulingPolicy):
    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: req.arrival_index, reverse=True)


@dataclass(frozen=True)
class QueueLengthReq(ControlRequest):
    pass


class KitTestPlugin:
    @hookimpl
    def register_scheduling_policies(self, register):
        register("kit-test-lifo", LastComeFirstServed)

    @hookimpl
    def register_message_types(self, register):
        register("kit_test.queue_length_req", QueueLengthReq)

    @hookimpl
    def register_message_handlers(self, component, register):
        if component == "scheduler":
            register(QueueLengthReq, lambda stats, message: {"waiting": stats.num_waiting_requests})


def short(max_new_tokens=3):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)


def test_the_chosen_plugin_policy_decides_the_order(tercet_scheduler):
    lifo = tercet_scheduler(plugins=[KitTestPlugin()], settings=["scheduler.policy=kit-test-lifo"],
                            max_running_requests=1)
    fcfs = tercet_scheduler(plugins=[KitTestPlugin()], max_running_requests=1)
    for harness in (lifo, fcfs):
        for rid in ("a", "b", "c"):
            harness.submit(rid, [5, 6, 7], short())
        tokens = harness.run_until_finished()
        assert {rid: len(ids) for rid, ids in tokens.items()} == {"a": 3, "b": 3, "c": 3}
    assert lifo.finished_rids == ["c", "b", "a"]
    assert fcfs.finished_rids == ["a", "b", "c"]
    assert len(lifo.forward_calls) >= 9  # one request at a time: at least a forward per token


def test_a_plugin_control_request_gets_its_handlers_reply(tercet_scheduler):
    harness = tercet_scheduler(plugins=[KitTestPlugin()])
    harness.submit("waiting", [1, 2, 3])
    reply = harness.control(QueueLengthReq(request_id="q1"))
    assert (reply.request_id, reply.rank, reply.ok) == ("q1", 0, True)
    assert reply.data == {"waiting": 1}  # delivered, not yet stepped
    harness.run_until_finished()
    assert harness.control(QueueLengthReq(request_id="q2")).data == {"waiting": 0}


def test_settings_reach_the_scheduler(tercet_scheduler):
    harness = tercet_scheduler(settings=["cache.prefix_cache=false"], max_total_tokens=128, page_size=4)
    assert harness.scheduler.kv_memory.page_allocator.num_total * 4 == 128
    assert harness.scheduler.config.cache.prefix_cache is False
