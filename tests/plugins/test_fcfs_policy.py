from types import SimpleNamespace

from tercet.plugins.fcfs_policy import FirstComeFirstServed


def test_orders_by_arrival():
    waiting = [SimpleNamespace(rid=rid, arrival_index=index) for rid, index in [("c", 2), ("a", 0), ("b", 1)]]
    assert [req.rid for req in FirstComeFirstServed(None).order(waiting)] == ["a", "b", "c"]
