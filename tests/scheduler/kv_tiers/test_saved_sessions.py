"""Saved sessions in a real scheduler: a prefix saved under a name, restored into a fresh pool, and the
next turn prefilling only its new tokens, with the tokens it would have had anyway."""

from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.ipc.control_messages import RestoreSessionReq, SaveSessionReq
from tercet.scheduler.kv_tiers.session_names import check_session_name

from kv_tier_helpers import CONVERSATION, OTHER, PAGE, run, tiered_harnesses

NEXT_TURN = CONVERSATION + [301, 302, 303, 304, 305, 306, 307, 308, 309, 310]


def save(harness, name: str, token_ids):
    return harness.control(SaveSessionReq(f"save-{name}", name, list(token_ids)))


def restore(harness, name: str):
    return harness.control(RestoreSessionReq(f"restore-{name}", name))


@pytest.fixture
def tiered(tercet_scheduler, tmp_path):
    return tiered_harnesses(tercet_scheduler, tmp_path)


def test_a_restored_session_lets_the_next_turn_prefill_only_its_new_tokens(tiered, tmp_path):
    reference = run(tiered("none", "cache.prefix_cache=false"), "next", NEXT_TURN)
    first = tiered("file", directory=tmp_path)
    run(first, "turn", CONVERSATION)
    reply = save(first, "chat-1", CONVERSATION)
    assert reply.ok and reply.data["saved_tokens"] == 6 * PAGE
    assert (tmp_path / "sessions" / "chat-1.session").is_file()

    restarted = tiered("file", directory=tmp_path)
    reply = restore(restarted, "chat-1")
    assert reply.ok and reply.data["restored_tokens"] == 6 * PAGE
    assert run(restarted, "next", NEXT_TURN) == reference
    assert restarted.cached_tokens["next"] == 6 * PAGE


def test_a_prefix_partly_below_the_pool_is_saved_whole(tiered, tmp_path):
    harness = tiered("file", directory=tmp_path)
    run(harness, "turn", CONVERSATION)
    run(harness, "other", OTHER)  # pushes the conversation's pages down to the file tier
    assert save(harness, "pushed", CONVERSATION).data["saved_tokens"] == 6 * PAGE


def test_save_and_restore_refuse_clearly(tiered, tmp_path):
    without_file_tier = tiered("host")
    reply = save(without_file_tier, "x", CONVERSATION)
    assert not reply.ok and reply.data["status_code"] == 400 and 'storage = "file"' in reply.message
    harness = tiered("file", directory=tmp_path)
    reply = save(harness, "never", [5] * 40)
    assert not reply.ok and reply.data["status_code"] == 404
    reply = restore(harness, "missing")
    assert not reply.ok and reply.data["status_code"] == 404
    reply = save(harness, "../escape", CONVERSATION)
    assert not reply.ok and reply.data["status_code"] == 400
    assert not (tmp_path / "escape.session").exists()


def test_a_corrupt_session_file_is_refused_not_loaded(tiered, tmp_path):
    harness = tiered("file", directory=tmp_path)
    run(harness, "turn", CONVERSATION)
    assert save(harness, "chat", CONVERSATION).ok
    path = tmp_path / "sessions" / "chat.session"
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF
    path.write_bytes(bytes(data))
    reply = restore(tiered("file", directory=tmp_path), "chat")
    assert not reply.ok and reply.data["status_code"] == 409 and "corrupt" in reply.message


@pytest.mark.parametrize("name", ["../x", ".hidden", "a/b", "", "x" * 129, "naïve", "a b", None, "..", "a\\b"])
def test_names_that_could_be_paths_are_refused(name):
    with pytest.raises(RequestError) as refused:
        check_session_name(name)
    assert refused.value.status_code == 400


@pytest.mark.parametrize("name", ["chat-1", "user_7.turn-3", "A", "x" * 128, "-dash-first"])
def test_plain_names_are_taken(name):
    assert check_session_name(name) == name
