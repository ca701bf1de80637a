"""build_scheduler: every part made from the config and the plugins, shared where the parts meet."""

from __future__ import annotations

from types import SimpleNamespace

from tercet.scheduler.assembly import adapters_in_use


def test_the_scheduler_gets_the_parts_its_config_chooses(make_harness):
    harness = make_harness(settings=["scheduler.policy=lpm", "speculative.proposer=ngram", "cache.prefix_cache=false"])
    scheduler = harness.scheduler
    assert scheduler.policy.plugin_name == "lpm_policy"
    assert scheduler.grammars.plugin_name == "llguidance_grammar"
    assert scheduler.model_step.speculation.plugin_name == "ngram_proposer"
    assert scheduler.prefix_cache is None and scheduler.adapters is None


def test_the_parts_share_one_set_of_queues_and_one_kv_memory(harness):
    scheduler = harness.scheduler
    for part in (scheduler.admission, scheduler.model_step, scheduler.embedding_step, scheduler.control_target):
        assert part.queues is scheduler.queues and part.kv_memory is scheduler.kv_memory
    assert scheduler.control_target.grammars is scheduler.grammars
    assert scheduler.control_target.speculation is scheduler.model_step.speculation is None
    assert scheduler.model_step.failures is scheduler.failures is scheduler.control_target.failures


def test_the_adapters_in_use_are_those_of_every_request_the_rank_holds():
    def req(name):
        return SimpleNamespace(lora_name=name)

    leader = SimpleNamespace(group=[req("waiting"), req(None)])
    queues = SimpleNamespace(running=[req("running")], waiting=[leader])
    grammars = SimpleNamespace(pending=[SimpleNamespace(group=[req("compiling")])])
    assert adapters_in_use(queues, grammars) == {"running", "waiting", None, "compiling"}
