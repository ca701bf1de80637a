"""/update_weights_from_disk refuses in a few words, and only loads from [server] weights_dirs when it is set."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from http_stand_in import StandInTokenizerManager, post

from tercet.config import TercetConfig
from tercet.ipc.control_messages import ControlReply, UpdateWeightsFromDiskReq

pytestmark = pytest.mark.anyio
ROUTE = "/update_weights_from_disk"


def manager_with(weights_dirs: tuple[str, ...] = ()) -> StandInTokenizerManager:
    manager = StandInTokenizerManager()
    manager.context = SimpleNamespace(config=TercetConfig().replace("server", weights_dirs=weights_dirs))
    return manager


async def refusal(model_path, manager: StandInTokenizerManager) -> str:
    response = await post({"model_path": model_path}, ROUTE, manager)
    assert response.status_code == 400 and response.json()["error"]["param"] == "model_path", response.text
    return response.json()["error"]["message"]


async def test_a_path_no_longer_than_a_path_may_be():
    manager = manager_with()
    message = await refusal("/" + "a" * 100_000, manager)
    assert len(message) < 200 and "aaaa" not in message
    assert "at most 4096 characters" in await refusal("/a\u0000b", manager)
    assert UpdateWeightsFromDiskReq not in manager.controls  # refused before anything paused or loaded


async def test_weights_dirs_keep_the_route_to_their_checkpoints(tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    (allowed / "model").mkdir(parents=True)
    other.mkdir()
    (allowed / "escape").symlink_to(other)
    manager = manager_with((str(allowed),))
    for outside in (str(other), str(allowed / ".." / "other"), str(allowed / "escape"), "/etc"):
        message = await refusal(outside, manager)
        assert message == "model_path is not under a directory that [server] weights_dirs allows"
    assert UpdateWeightsFromDiskReq not in manager.controls
    served = await post({"model_path": str(allowed / "model")}, ROUTE, manager)
    assert served.status_code == 200 and UpdateWeightsFromDiskReq in manager.controls


async def test_a_rank_that_did_not_load_says_so_in_its_own_words():
    manager = manager_with()

    async def control(request_type, **fields):
        manager.controls.append(request_type)
        if request_type is UpdateWeightsFromDiskReq:
            return [ControlReply("r", 0, False, "the weights could not be loaded")]
        return [ControlReply("r", 0, True)]

    manager.control = control
    message = await refusal("/srv/checkpoints/next", manager)
    assert message == "weights not updated: rank 0: the weights could not be loaded; the previous weights keep serving"
