"""Load balancer shortest_queue: the rank with the fewest completions in flight, the lowest on a tie."""

from tercet.config import TercetConfig
from tercet.frontend.load_balancer import RoutingRequest
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager


def test_it_takes_the_least_loaded_rank_and_the_lowest_on_a_tie():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).load_balancers
    assert registry.entries["shortest_queue"].plugin_name == "shortest_queue_balancer"
    balancer = registry.get("shortest_queue")(TercetConfig(), 3)
    request = RoutingRequest("r", [1, 2, 3])
    assert [balancer.choose_rank(request, loads) for loads in ([2, 1, 3], [0, 0, 0], [4, 2, 2])] == [1, 0, 1]
