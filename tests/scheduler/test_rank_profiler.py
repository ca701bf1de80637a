"""A rank records a torch profile while it serves, and writes it as one Chrome trace."""

from __future__ import annotations

import json
import os

from tercet.ipc.control_messages import ProfileStatusReq, StartProfileReq, StopProfileReq
from tercet.sampling_params import SamplingParams

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)


def profiling_harness(make_harness, tmp_path):
    root = tmp_path / "profiles"
    (root / "run").mkdir(parents=True)
    return make_harness(settings=[f"server.profile_dir={root}"]), root


def trace_events(path: str) -> list[dict]:
    with open(path) as trace:
        return json.load(trace)["traceEvents"]


def test_a_recording_of_num_steps_ends_by_itself_and_stop_gives_its_trace(make_harness, tmp_path):
    harness, root = profiling_harness(make_harness, tmp_path)
    reply = harness.control(StartProfileReq("ask", output_dir=str(root / "run"), num_steps=3))
    assert reply.ok and reply.data["recording"], reply
    harness.submit("a", [1, 2, 3], GREEDY)
    outputs = harness.run_until_finished()
    assert len(outputs["a"]) == 6  # served while recording
    status = harness.control(ProfileStatusReq("ask"))
    assert status.data == {"recording": False, "num_steps_done": 3, "path": str(root / "run" / "dp0.trace.json")}
    stopped = harness.control(StopProfileReq("ask"))
    assert stopped.ok and stopped.data == {"path": str(root / "run" / "dp0.trace.json"), "num_steps": 3}
    events = trace_events(stopped.data["path"])
    # The model's forward was recorded: torch's operators are in the trace.
    assert [event for event in events if str(event.get("name")).startswith("aten::")], events[:5]
    # Collected once: a second stop has nothing to give.
    again = harness.control(StopProfileReq("ask"))
    assert not again.ok and again.data["status_code"] == 409


def test_a_recording_runs_until_stopped_and_a_second_start_is_refused(make_harness, tmp_path):
    harness, root = profiling_harness(make_harness, tmp_path)
    assert harness.control(StartProfileReq("ask", output_dir=str(root / "run"), activities=["CPU"])).ok
    refused = harness.control(StartProfileReq("ask", output_dir=str(root / "run")))
    assert not refused.ok and refused.data["status_code"] == 409 and "already" in refused.message
    harness.submit("a", [1, 2, 3], GREEDY)
    harness.run_until_finished()
    assert harness.control(ProfileStatusReq("ask")).data["recording"]
    stopped = harness.control(StopProfileReq("ask"))
    assert stopped.ok and stopped.data["num_steps"] >= 6
    assert trace_events(stopped.data["path"])


def test_a_directory_outside_the_root_is_refused_and_nothing_is_written(make_harness, tmp_path):
    harness, root = profiling_harness(make_harness, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    for output_dir in (str(outside), str(root / "link"), str(root / ".." / "outside"), "run",
                       str(root / "link" / "deeper")):
        reply = harness.control(StartProfileReq("ask", output_dir=output_dir))
        assert not reply.ok and "inside [server] profile_dir" in reply.message, output_dir
    assert os.listdir(outside) == []
    assert harness.control(ProfileStatusReq("ask")).data["recording"] is False


def test_a_directory_missing_inside_the_root_is_made(make_harness, tmp_path):
    # As on a rank of another node, where the API process made nothing.
    harness, root = profiling_harness(make_harness, tmp_path)
    assert harness.control(StartProfileReq("ask", output_dir=str(root / "new" / "run"), num_steps=1)).ok
    harness.submit("a", [1, 2, 3], GREEDY)
    harness.run_until_finished()
    assert os.path.isfile(harness.control(StopProfileReq("ask")).data["path"])


def test_activities_the_rank_cannot_record_are_refused(make_harness, tmp_path):
    harness, root = profiling_harness(make_harness, tmp_path)
    for activities, words in ((["GPU"], "activities must be some of"), (["CUDA"], "no CUDA device")):
        reply = harness.control(StartProfileReq("ask", output_dir=str(root / "run"), activities=activities))
        assert not reply.ok and words in reply.message and reply.data["status_code"] == 400
