"""Load balancer ``cache_aware``: each prompt to the rank whose prefix cache holds most of it, within load bounds.

Options in ``[plugins.cache_aware]`` (see ``balancer.py`` and docs/configuration.md). The
trees and the routing rule are imported only when a server builds the balancer.
"""

from tercet.plugin_api import hookimpl


def cache_aware(config, num_ranks):
    from .balancer import CacheAware

    return CacheAware(config, num_ranks)


@hookimpl
def register_load_balancers(register):
    register("cache_aware", cache_aware)
