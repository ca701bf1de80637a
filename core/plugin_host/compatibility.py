"""Which plugins fit this tercet: the version of its plugin API, and the check of what a plugin declares.

:data:`API_VERSION` is the version of :mod:`tercet.plugin_api` (which exports
it); a plugin declares the versions it works with in a module-level
``TERCET_API_VERSIONS`` specifier, and one whose range leaves out the running
version is refused at start-up with an error naming both.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from tercet.errors import ConfigError

# The promise (docs/plugins.md, "Compatibility"): a minor version only adds, a major may change anything.
API_VERSION = "1.6"


def check_api_versions(plugin_name: str, declared) -> None:
    """Refuse a plugin whose ``TERCET_API_VERSIONS`` leaves out the running plugin API version."""
    if declared is None:
        return
    try:
        supported = SpecifierSet(declared)
    except (InvalidSpecifier, TypeError):
        raise ConfigError(
            f"plugin {plugin_name!r}: TERCET_API_VERSIONS must be a version specifier such as '>=1.0,<2', "
            f"got {declared!r}"
        ) from None
    if API_VERSION not in supported:
        raise ConfigError(
            f"plugin {plugin_name!r} supports tercet plugin API {declared}, but this tercet's is {API_VERSION}; "
            f"install a version of the plugin made for it, or disable it with plugins.disable = [{plugin_name!r}]"
        )
