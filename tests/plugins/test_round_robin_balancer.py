"""Load balancer round_robin: the ranks in turn, whatever their loads."""

from tercet.config import TercetConfig
from tercet.frontend.load_balancer import RoutingRequest
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager


def test_it_takes_the_ranks_in_turn_whatever_their_loads():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).load_balancers
    assert registry.entries["round_robin"].plugin_name == "round_robin_balancer"
    balancer = registry.get("round_robin")(TercetConfig(), 3)
    request = RoutingRequest("r", [1, 2, 3])
    assert [balancer.choose_rank(request, [9, 0, 0]) for _ in range(5)] == [0, 1, 2, 0, 1]
