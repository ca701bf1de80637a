"""A scheduler serving LoRA adapters: mixed batches, an adapter-aware prefix cache, loads and unloads."""

from __future__ import annotations

import pytest

from tercet.ipc.control_messages import ListLoraAdaptersReq, LoadLoraAdapterReq, UnloadLoraAdapterReq
from tercet.ipc.messages import BatchTokenIDOutput
from tercet.sampling_params import SamplingParams

PROMPT = list(range(100, 140))
GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)


@pytest.fixture
def lora_scheduler(tercet_scheduler, tiny_adapters):
    def make(*extra, adapters=("every", "attention", "mlp")):
        listed = ",".join(f"{name}={tiny_adapters[name]}" for name in adapters)
        return tercet_scheduler(settings=[f"lora.adapters={listed}", "lora.max_rank=8", *extra],
                                max_total_tokens=512, max_running_requests=8)
    return make


def _outputs_of(harness) -> tuple[dict[str, list[int]], dict[str, object]]:
    """Step until idle: every request's tokens, and its finish reason."""
    tokens, reasons = {}, {}
    for _ in range(200):
        for output in harness.step():
            if isinstance(output, BatchTokenIDOutput):
                for rid, new_ids, reason in zip(output.rids, output.new_token_ids, output.finished_reasons):
                    tokens.setdefault(rid, []).extend(new_ids)
                    if reason is not None:
                        reasons[rid] = reason
        if harness.is_idle():
            return tokens, reasons
    raise AssertionError("requests did not finish")


def test_a_mixed_batch_gives_each_request_what_it_gets_alone(lora_scheduler):
    harness = lora_scheduler("cache.prefix_cache=false")
    names = [None, "every", "attention", "mlp", "every", None]
    alone = {}
    for index, name in enumerate(names):
        harness.submit(f"alone-{index}", PROMPT[index:], GREEDY, lora_name=name)
        alone.update(harness.run_until_finished())
    for index, name in enumerate(names):
        harness.submit(f"mixed-{index}", PROMPT[index:], GREEDY, lora_name=name)
    mixed = harness.run_until_finished()
    assert any(len(batch.lora_runs) >= 3 for batch in harness.forward_calls)
    for index in range(len(names)):
        assert mixed[f"mixed-{index}"] == alone[f"alone-{index}"], names[index]
    assert len({tuple(alone[f"alone-{index}"]) for index in range(4)}) == 4


def test_a_prompt_cached_under_one_adapter_is_never_reused_under_another_or_the_base(lora_scheduler):
    harness = lora_scheduler()
    cached = {}
    for rid, name in [("every", "every"), ("attention", "attention"), ("base", None), ("every-again", "every")]:
        harness.submit(rid, PROMPT, GREEDY, lora_name=name)
        harness.deliver()
        harness.scheduler.run_step()
        cached[rid] = next(req for req in harness.scheduler.queues.running if req.rid == rid).num_prefix_cache_hits
        harness.run_until_finished()
    assert cached == {"every": 0, "attention": 0, "base": 0, "every-again": 32}


def test_an_unknown_adapter_is_a_404_naming_the_loaded_ones(lora_scheduler):
    harness = lora_scheduler()
    harness.submit("x", PROMPT, GREEDY, lora_name="nope")
    _, reasons = _outputs_of(harness)
    assert reasons["x"].status_code == 404
    assert "no LoRA adapter named 'nope' is loaded (loaded: every, attention, mlp)" in reasons["x"].message


def test_load_use_unload_and_reload_at_run_time(lora_scheduler, tiny_adapters):
    harness = lora_scheduler(adapters=("every",))
    reply = harness.control(LoadLoraAdapterReq("1", lora_name="mlp", lora_path=tiny_adapters["mlp"]))
    assert reply.ok and reply.data["rank"] == 2
    harness.submit("first", PROMPT, GREEDY, lora_name="mlp")
    first = harness.run_until_finished()["first"]
    twice = harness.control(LoadLoraAdapterReq("2", lora_name="mlp", lora_path=tiny_adapters["every"]))
    assert not twice.ok and "already loaded" in twice.message
    assert "mlp" in harness.scheduler.prefix_cache.roots
    assert harness.control(UnloadLoraAdapterReq("3", lora_name="mlp")).ok
    assert "mlp" not in harness.scheduler.prefix_cache.roots  # its cached prompt went with it
    harness.submit("gone", PROMPT, GREEDY, lora_name="mlp")
    assert _outputs_of(harness)[1]["gone"].status_code == 404
    assert harness.control(LoadLoraAdapterReq("4", lora_name="mlp", lora_path=tiny_adapters["mlp"])).ok
    harness.submit("again", PROMPT, GREEDY, lora_name="mlp")
    assert harness.run_until_finished()["again"] == first


def test_an_adapter_in_use_is_not_unloaded(lora_scheduler):
    harness = lora_scheduler()
    harness.submit("busy", PROMPT, SamplingParams(max_new_tokens=50, temperature=0.0, ignore_eos=True),
                   lora_name="every")
    harness.step()
    reply = harness.control(UnloadLoraAdapterReq("1", lora_name="every"))
    assert not reply.ok and reply.data["status_code"] == 409 and "in use" in reply.message
    harness.run_until_finished()
    assert harness.control(UnloadLoraAdapterReq("2", lora_name="every")).ok


def test_past_max_loaded_the_least_recently_used_idle_adapter_is_dropped_and_reloaded_on_use(lora_scheduler):
    harness = lora_scheduler("lora.max_loaded=2")
    lora_model = harness.scheduler.adapters.lora_model
    assert set(lora_model.adapters) == {"attention", "mlp"}  # "every", loaded first, made room for "mlp"
    harness.submit("a", PROMPT, GREEDY, lora_name="attention")
    harness.submit("e", PROMPT, GREEDY, lora_name="every")
    outputs = harness.run_until_finished()
    assert set(lora_model.adapters) == {"attention", "every"}
    listed = harness.control(ListLoraAdaptersReq("1")).data["adapters"]
    assert [(entry["name"], entry["is_loaded"]) for entry in listed] == [
        ("every", True), ("attention", True), ("mlp", False)]
    harness.submit("e2", PROMPT, GREEDY, lora_name="every")
    assert harness.run_until_finished()["e2"] == outputs["e"]


def test_with_every_loaded_adapter_in_use_another_waits_for_none_and_is_refused(lora_scheduler):
    harness = lora_scheduler("lora.max_loaded=1", adapters=("every", "mlp"))
    harness.submit("busy", PROMPT, SamplingParams(max_new_tokens=50, temperature=0.0, ignore_eos=True),
                   lora_name="mlp")
    harness.submit("other", PROMPT, GREEDY, lora_name="every")
    _, reasons = _outputs_of(harness)
    assert reasons["other"].status_code == 503 and "lora.max_loaded" in reasons["other"].message
