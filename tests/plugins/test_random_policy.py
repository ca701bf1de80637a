import pytest

from tercet.config import TercetConfig
from tercet.errors import ConfigError
from tercet.plugins.random_policy import RandomOrder
from tercet.scheduler.policy import SchedulerView
from tercet.testing import make_request_view

NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def make_queue(size=20):
    return [make_request_view(f"r{index}", index, [1, 2]) for index in range(size)]


def orders(seed, num_steps=3):
    policy = RandomOrder(TercetConfig(plugins={"random": {"seed": seed}}))
    waiting = make_queue()
    return [[req.rid for req in policy.order(waiting, NO_VIEW)] for _ in range(num_steps)]


def test_the_same_seed_gives_the_same_orders():
    assert orders(seed=7) == orders(seed=7)


def test_orders_are_permutations_that_differ_by_seed():
    first, second = orders(seed=7, num_steps=1)[0], orders(seed=8, num_steps=1)[0]
    assert sorted(first) == sorted(second) == sorted(req.rid for req in make_queue())
    assert first != second
    assert first != [req.rid for req in make_queue()]


def test_the_order_does_not_depend_on_how_the_queue_is_held():
    policy_a = RandomOrder(TercetConfig(plugins={"random": {"seed": 3}}))
    policy_b = RandomOrder(TercetConfig(plugins={"random": {"seed": 3}}))
    queue = make_queue()
    assert [r.rid for r in policy_a.order(queue, NO_VIEW)] == [r.rid for r in policy_b.order(queue[::-1], NO_VIEW)]


def test_without_a_seed_it_still_orders_everything():
    waiting = make_queue()
    assert sorted(RandomOrder(TercetConfig()).order(waiting, NO_VIEW), key=lambda req: req.arrival_index) == waiting


def test_a_seed_that_is_not_an_integer_is_named():
    with pytest.raises(ConfigError, match=r"\[plugins.random\] seed must be an integer"):
        RandomOrder(TercetConfig(plugins={"random": {"seed": "seven"}}))


def test_tensor_parallel_ranks_need_a_seed_to_order_alike():
    config = TercetConfig().replace("parallel", tp_size=2)
    with pytest.raises(ConfigError, match=r"needs \[plugins.random\] seed with parallel.tp_size > 1"):
        RandomOrder(config)
    seeded = TercetConfig(plugins={"random": {"seed": 3}}).replace("parallel", tp_size=2)
    assert [r.rid for r in RandomOrder(seeded).order(make_queue(), NO_VIEW)] == orders(seed=3, num_steps=1)[0]
