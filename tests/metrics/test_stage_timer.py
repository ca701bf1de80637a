import logging
import time

from tercet.metrics.stage_timer import NoStageTimer, StageTimer, stage_timer


def test_stages_are_reported_per_step_once_the_interval_passes(caplog):
    timer = StageTimer("scheduler-0", interval=0.2, logger=logging.getLogger("test.timer"))
    with caplog.at_level(logging.INFO, logger="test.timer"):
        for _ in range(2):
            with timer.stage("forward"):
                time.sleep(0.03)
            with timer.stage("sample"):
                time.sleep(0.01)
            timer.end_step()
        assert caplog.records == []  # the interval has not passed yet
        time.sleep(0.15)
        timer.end_step()
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith("scheduler-0 profile: 3 steps in ")
    forward_ms = float(message.split("forward ")[1].split(" ms")[0])
    sample_ms = float(message.split("sample ")[1].split(" ms")[0])
    # 2 × 30 ms over 3 steps, and 2 × 10 ms over 3 steps (sleep overshoots a little).
    assert 19 <= forward_ms < 40 and 6 <= sample_ms < 20
    assert timer.num_steps == 0 and not timer.seconds  # a fresh window


def test_profiling_off_is_a_stand_in():
    timer = stage_timer("scheduler-0", 0.0, logging.getLogger("test.timer"))
    assert isinstance(timer, NoStageTimer)
    with timer.stage("forward"):
        pass
    timer.end_step()
