"""A real DetokenizerManager, in-process, over real ZeroMQ ipc sockets: the
test plays the scheduler (PUSH to the detokenizer) and the TokenizerManager
(PULL bound on its input), and drives the manager's dispatcher by hand."""

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tercet.config import load_config, parse_set_options
from tercet.detokenizer.detokenizer_manager import DetokenizerManager
from tercet.ipc.channels import MessageReceiver, MessageSender
from tercet.ipc.messages import (
    BatchStrOutput,
    BatchTokenIDOutput,
    DetokenizeParams,
    FinishReason,
    TokenLogprobs,
)
from tercet.ipc.port_args import PortArgs
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.manager import create_plugin_manager, register_entry_points
from tercet.processes.context import ProcessContext
from tercet.testing import Ping

STRATEGIES = ["incremental", "decode_stream"]
TRICKY_CHARACTERS = "日本語中文🙂🚀\ufffd"


class PingPlugin:
    """A third party's message type, handled by the detokenizer."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def register_message_types(self, register):
        register("test.ping", Ping)

    @hookimpl
    def register_message_handlers(self, component, register):
        if component == "detokenizer":
            register(Ping, lambda manager, message: self.seen.append((manager, message)))


class Harness:
    def __init__(self, runtime_parent, tokenizer, settings, plugin_manager=None):
        config = load_config(environ={}, overrides=parse_set_options(settings))
        if plugin_manager is not None:
            register_entry_points(plugin_manager)
        context = ProcessContext.create(config, plugin_manager)
        self.strategy = config.detokenizer.strategy
        self.port_args = PortArgs.create(context.create_transport(), parent_dir=str(runtime_parent))
        serializer = context.create_serializer()
        self.zmq_context = zmq.Context()
        self.from_detokenizer = MessageReceiver(self.zmq_context, self.port_args.tokenizer_input, serializer, bind=True)
        self.manager = DetokenizerManager(context, self.port_args, tokenizer)
        self.to_detokenizer = MessageSender(self.zmq_context, self.port_args.detokenizer_input, serializer)
        self.num_rids = 0

    def new_rid(self) -> str:
        self.num_rids += 1
        return f"r{self.num_rids}"

    def deliver(self, message) -> None:
        """Send one message to the manager and let its dispatcher handle it."""
        self.to_detokenizer.send(message)
        assert self.manager.receiver.poll(5000)
        for received in self.manager.receiver.receive_pending():
            self.manager.dispatch(received)

    def exchange(self, batch: BatchTokenIDOutput) -> BatchStrOutput:
        self.deliver(batch)
        assert self.from_detokenizer.poll(5000)
        (output,) = self.from_detokenizer.receive_pending()
        return output

    def close(self):
        self.manager.close()
        self.to_detokenizer.close()
        self.from_detokenizer.close()
        self.zmq_context.term()
        self.port_args.remove_runtime_dir()


def batch(rows: list[dict]) -> BatchTokenIDOutput:
    """One step's output from per-request rows (missing columns get defaults)."""
    return BatchTokenIDOutput(
        rids=[row["rid"] for row in rows],
        new_token_ids=[row.get("ids", []) for row in rows],
        finished_reasons=[row.get("finish") for row in rows],
        prompt_tokens=[row.get("prompt_tokens", 3) for row in rows],
        completion_tokens=[row.get("completion_tokens", 0) for row in rows],
        detokenize_params=[row.get("params") for row in rows],
        output_logprobs=[row.get("output_logprobs") for row in rows],
        prompt_logprobs=[row.get("prompt_logprobs") for row in rows],
        cached_tokens=[row.get("cached_tokens", 0) for row in rows],
    )


def stream_request(harness, rid, token_ids, chunk_sizes, params, finish=FinishReason("length")):
    """Send one request's tokens in chunks (its params on the first), return the text deltas."""
    deltas, position, index = [], 0, 0
    while True:
        size = chunk_sizes[index % len(chunk_sizes)] if chunk_sizes else 1
        chunk = token_ids[position : position + size]
        position += size
        is_last = position >= len(token_ids)
        row = {"rid": rid, "ids": chunk, "params": params if index == 0 else None, "finish": finish if is_last else None}
        (delta,) = harness.exchange(batch([row])).text_deltas
        deltas.append(delta)
        index += 1
        if is_last:
            return deltas


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    from tercet.tokenizer.loading import load_tokenizer

    return load_tokenizer(str(default_model_dir))


@pytest.fixture(scope="module", params=STRATEGIES)
def harness(request, tmp_path_factory, tokenizer):
    harness = Harness(
        tmp_path_factory.mktemp("detok"), tokenizer, [f"detokenizer.strategy={request.param}"]
    )
    yield harness
    harness.close()


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def cut_at_first_stop(text, stop, no_stop_trim):
    found = [(text.find(s), len(s)) for s in stop if s in text]
    if not found:
        return text
    start, length = min(found)
    return text[: start + length] if no_stop_trim else text[:start]


def test_the_configured_strategy_is_used(harness):
    from tercet.plugins.decode_stream_detokenizer import DecodeStreamDetokenizer
    from tercet.plugins.incremental_detokenizer import IncrementalDetokenizer

    expected = {"incremental": IncrementalDetokenizer, "decode_stream": DecodeStreamDetokenizer}
    assert type(harness.manager.detokenizer) is expected[harness.strategy]


def test_columns_pass_through_and_requests_interleave(harness, tokenizer):
    a, b = harness.new_rid(), harness.new_rid()
    text_a, text_b = "The capital of France is Paris.", "日本語と🙂 emoji"
    ids_a, ids_b = encode(tokenizer, text_a), encode(tokenizer, text_b)
    logprobs = TokenLogprobs(ids_a[:2], [-0.5, -1.25], [[[ids_a[0], -0.5], [7, -2.0]], []])
    prompt_logprobs = TokenLogprobs([1, 2, 3], [None, -3.0, -0.25], [[], [], []])
    first = harness.exchange(batch([
        {"rid": a, "ids": ids_a[:2], "params": DetokenizeParams(), "output_logprobs": logprobs,
         "prompt_logprobs": prompt_logprobs, "completion_tokens": 2, "prompt_tokens": 3},
        {"rid": b, "ids": ids_b[:1], "params": DetokenizeParams(), "completion_tokens": 1, "prompt_tokens": 5},
    ]))
    assert first.rids == [a, b]
    assert first.new_token_ids == [ids_a[:2], ids_b[:1]]
    assert first.output_logprobs == [logprobs, None]
    assert first.prompt_logprobs == [prompt_logprobs, None]
    assert first.prompt_tokens == [3, 5] and first.completion_tokens == [2, 1]
    assert first.finished_reasons == [None, None]
    finish = FinishReason("stop", matched_token=tokenizer.eos_token_id)
    last = harness.exchange(batch([
        {"rid": b, "ids": ids_b[1:], "finish": FinishReason("length")},
        {"rid": a, "ids": ids_a[2:], "finish": finish},
    ]))
    assert last.rids == [b, a] and last.finished_reasons == [FinishReason("length"), finish]
    assert first.text_deltas[0] + last.text_deltas[1] == text_a
    assert first.text_deltas[1] + last.text_deltas[0] == text_b
    assert harness.manager.started_rids == set() and harness.manager.stop_filters == {}
    assert harness.manager.detokenizer.states == {}


def test_skip_special_tokens_comes_from_the_first_output(harness, tokenizer):
    token_ids = [*encode(tokenizer, "Hi"), tokenizer.eos_token_id]
    for skip in (True, False):
        deltas = stream_request(harness, harness.new_rid(), token_ids, [1], DetokenizeParams(skip_special_tokens=skip))
        assert "".join(deltas) == tokenizer.decode(token_ids, skip_special_tokens=skip)


def test_missing_params_mean_the_defaults(harness, tokenizer):
    token_ids = [*encode(tokenizer, "Hi"), tokenizer.eos_token_id]
    assert "".join(stream_request(harness, harness.new_rid(), token_ids, [1], None)) == "Hi"


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_stop_string_is_trimmed_and_never_shown_in_part(harness, tokenizer, no_stop_trim):
    text = "Sure. The answer is 42 and that is final."
    token_ids = encode(tokenizer, text)
    params = DetokenizeParams(stop=["42 and", "final"], no_stop_trim=no_stop_trim)
    deltas = stream_request(
        harness, harness.new_rid(), token_ids, [1], params, FinishReason("stop", matched_text="42 and")
    )
    expected = "Sure. The answer is 42 and" if no_stop_trim else "Sure. The answer is "
    assert "".join(deltas) == expected
    shown = ""
    for delta in deltas:
        shown += delta
        assert "4" not in shown or shown == expected


def test_held_back_text_is_released_when_the_request_ends(harness, tokenizer):
    rid = harness.new_rid()
    token_ids = encode(tokenizer, "Hello wor")
    deltas = stream_request(harness, rid, token_ids, [1], DetokenizeParams(stop=["world"]), FinishReason("abort"))
    assert deltas[-1].endswith("wor") and "".join(deltas) == "Hello wor"
    assert rid not in harness.manager.stop_filters


def test_finish_without_new_tokens(harness, tokenizer):
    rid = harness.new_rid()
    token_ids = encode(tokenizer, "abc STO")
    harness.exchange(batch([{"rid": rid, "ids": token_ids, "params": DetokenizeParams(stop=["STOP"])}]))
    (delta,) = harness.exchange(batch([{"rid": rid, "ids": [], "finish": FinishReason("abort")}])).text_deltas
    assert delta.endswith("STO")
    assert rid not in harness.manager.started_rids


chunk_sizes = st.lists(st.integers(1, 6), min_size=1, max_size=6)


@st.composite
def token_ids_and_stops(draw, tokenizer, skip_special_tokens):
    if draw(st.booleans()):
        text = draw(st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(TRICKY_CHARACTERS)), max_size=30))
        token_ids = tokenizer.encode(text, add_special_tokens=False)
    else:
        token_ids = draw(st.lists(st.integers(0, 49151), min_size=1, max_size=24))
    decoded = tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    substring = st.builds(
        lambda i, n: decoded[i : i + n], st.integers(0, max(len(decoded) - 1, 0)), st.integers(1, 6)
    ).filter(bool)
    # A stop string that the text ends with only the start of, so it is held
    # back to the end and then released.
    unfinished = st.builds(
        lambda n, extra: decoded[len(decoded) - n :] + extra, st.integers(1, 3), st.text(min_size=1, max_size=2)
    )
    stop = draw(st.lists(st.one_of(substring, unfinished, st.text(min_size=1, max_size=3)), max_size=3))
    return token_ids, stop


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), chunk_sizes=chunk_sizes, no_stop_trim=st.booleans(), skip_special_tokens=st.booleans())
def test_any_stream_gives_the_decode_cut_at_the_first_stop(
    harness, tokenizer, data, chunk_sizes, no_stop_trim, skip_special_tokens
):
    token_ids, stop = data.draw(token_ids_and_stops(tokenizer, skip_special_tokens))
    params = DetokenizeParams(skip_special_tokens, stop, no_stop_trim)
    deltas = stream_request(harness, harness.new_rid(), token_ids, chunk_sizes, params)
    decoded = tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    expected = cut_at_first_stop(decoded, stop, no_stop_trim)
    assert "".join(deltas) == expected
    # No part of the matched stop string is shown before the whole of it is.
    match_start = len(cut_at_first_stop(decoded, stop, False))
    shown = ""
    for delta in deltas:
        shown += delta
        assert len(shown) <= match_start or shown == expected


def test_plugin_message_handlers_still_dispatch(tmp_path_factory, tokenizer):
    plugin = PingPlugin()
    harness = Harness(
        tmp_path_factory.mktemp("detok"), tokenizer, [], create_plugin_manager(load_entry_points=False, extra_plugins=[plugin])
    )
    try:
        harness.deliver(Ping("hello"))
        assert plugin.seen == [(harness.manager, Ping("hello"))]
        text = "still works"
        deltas = stream_request(harness, "x", encode(tokenizer, text), [2], DetokenizeParams())
        assert "".join(deltas) == text
    finally:
        harness.close()


POISON_TOKEN = 13


class FaultyStrategyPlugin:
    """A detokenizer strategy with a bug: it raises on one token id."""

    @hookimpl
    def register_detokenizers(self, register):
        from tercet.plugins.incremental_detokenizer import IncrementalDetokenizer

        class Faulty(IncrementalDetokenizer):
            def append(self, rid, token_ids):
                if POISON_TOKEN in token_ids:
                    raise IndexError("a bug in the strategy")
                return super().append(rid, token_ids)

        register("faulty", Faulty)


def test_a_failing_strategy_ends_only_its_request_and_aborts_it_in_the_scheduler(tmp_path_factory, tokenizer):
    from tercet.ipc.messages import AbortReq, ContainedFailureReport

    harness = Harness(
        tmp_path_factory.mktemp("detok"), tokenizer, ["detokenizer.strategy=faulty"],
        create_plugin_manager(load_entry_points=False, extra_plugins=[FaultyStrategyPlugin()]),
    )
    serializer = ProcessContext.create(load_config(environ={})).create_serializer()
    # Plays the scheduler's input, where the abort goes.
    to_scheduler = MessageReceiver(harness.zmq_context, harness.port_args.scheduler_input, serializer, bind=True)
    try:
        good_ids = encode(tokenizer, "fine text")
        assert POISON_TOKEN not in good_ids
        harness.deliver(batch([
            {"rid": "good", "ids": good_ids[:1], "params": DetokenizeParams()},
            {"rid": "bad", "ids": [POISON_TOKEN], "params": DetokenizeParams()},
        ]))
        received = []
        while len(received) < 2 and harness.from_detokenizer.poll(5000):
            received += harness.from_detokenizer.receive_pending()
        (report,) = [m for m in received if isinstance(m, ContainedFailureReport)]
        assert report == ContainedFailureReport("detokenizer", "detokenizer", harness.manager.strategy_plugin)
        (output,) = [m for m in received if isinstance(m, BatchStrOutput)]
        assert output.rids == ["good", "bad"]
        bad_reason = output.finished_reasons[1]
        assert bad_reason.kind == "abort" and bad_reason.status_code == 500 and output.text_deltas[1] == ""
        assert output.finished_reasons[0] is None
        assert to_scheduler.poll(5000)
        assert to_scheduler.receive_pending() == [AbortReq("bad")]

        # The scheduler's outputs for it that were already on their way are dropped, up to its last one.
        last = harness.exchange(batch([
            {"rid": "bad", "ids": [5]},
            {"rid": "good", "ids": good_ids[1:], "finish": FinishReason("length")},
        ]))
        assert last.rids == ["good"]
        assert output.text_deltas[0] + last.text_deltas[0] == "fine text"
        harness.deliver(batch([{"rid": "bad", "ids": [], "finish": FinishReason("abort")}]))
        # Nothing is sent for it; the next real output shows the detokenizer kept going.
        after = harness.exchange(batch([{"rid": "next", "ids": good_ids, "params": DetokenizeParams(),
                                         "finish": FinishReason("length")}]))
        assert after.rids == ["next"] and after.text_deltas == ["fine text"]
        assert harness.manager.failed_rids == set() and harness.manager.started_rids == set()
        assert harness.manager.failures.as_dict()["by_kind"] == {"detokenizer": 1}
    finally:
        to_scheduler.close()
        harness.close()
