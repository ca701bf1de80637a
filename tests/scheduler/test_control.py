import logging

from tercet.ipc.control_messages import AbortRequestsReq, UpdateWeightsFromDiskReq
from tercet.sampling_params import SamplingParams
from tercet.scheduler.control import WEIGHTS_NOT_LOADED


def test_abort_requests_ends_each_id_and_its_completions_and_nothing_else(harness):
    harness.scheduler.queues.pause()  # nothing runs: all stay waiting
    harness.submit("w2:a", [1, 2, 3], SamplingParams(max_new_tokens=4, temperature=0.0, ignore_eos=True, n=2))
    harness.submit("w2:ab", [1, 2, 3])
    harness.submit("w1:a", [1, 2, 3])
    reply = harness.control(AbortRequestsReq("ask", rids=["w2:a", "w3:gone"]))
    assert reply.ok and reply.data == {"num_aborted": 2}
    waiting = [req.rid for leader in harness.scheduler.queues.waiting for req in leader.group]
    assert waiting == ["w2:ab", "w1:a"]


def test_weights_that_do_not_load_are_refused_in_a_few_words_and_logged_once(harness, tmp_path, caplog):
    # A readable file named like a checkpoint: the loader's own error quotes its first bytes.
    secret = tmp_path / ("d" * 200) / "secret.gguf"
    secret.parent.mkdir()
    secret.write_bytes(b"SECRETBYTES" * 10)
    before = harness.scheduler.model_runner.model
    for model_path in (str(secret), "/no/such/checkpoint", str(tmp_path)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            reply = harness.control(UpdateWeightsFromDiskReq("ask", model_path=model_path))
        assert not reply.ok and reply.message == WEIGHTS_NOT_LOADED
        assert "SECR" not in reply.message and model_path not in reply.message
        # One WARNING line, with the reason, for the operator; no ERROR, no traceback.
        ((record,),) = [[record for record in caplog.records if record.name == "tercet.scheduler.control"]]
        assert record.levelno == logging.WARNING and record.exc_info is None and "\n" not in record.getMessage()
        assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert harness.scheduler.model_runner.model is before
    # Nor is it counted as the rank's failure.
    assert "control_handler" not in harness.scheduler.failures.as_dict()["by_kind"]
