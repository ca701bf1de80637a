import time

from tercet.processes.watchdog import StepHeartbeat


def test_a_resting_scheduler_is_never_stalled():
    heartbeat = StepHeartbeat()
    assert heartbeat.stalled_for() == 0.0
    heartbeat.beat()
    heartbeat.rest()
    time.sleep(0.05)
    assert heartbeat.stalled_for() == 0.0


def test_stalled_time_counts_from_the_last_beat():
    heartbeat = StepHeartbeat()
    heartbeat.beat()
    time.sleep(0.1)
    first = heartbeat.stalled_for()
    assert 0.1 <= first < 5
    heartbeat.beat()
    assert heartbeat.stalled_for() < first
