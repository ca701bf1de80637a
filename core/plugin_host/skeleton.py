"""``tercet plugin new KIND NAME``: a pip-installable plugin package to start from.

The kinds are the table of component kinds (:mod:`tercet.plugin_host.kinds`),
spelt with hyphens (``scheduling-policy``); the message-type skeleton brings
a scheduler handler and an HTTP route with its type, since a message type is
only useful with them. Each kind's module and test are template files under
``skeleton_templates/<registry>/``; the ``pyproject.toml`` and README are shared.
A skeleton is a distribution with one module, an entry point in the ``tercet``
group, a README, and tests that use :mod:`tercet.testing`'s fixtures::

    NAME/
      pyproject.toml   README.md   tercet_NAME.py   tests/test_tercet_NAME.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from string import Template

from tercet.errors import TercetError
from tercet.plugin_host.compatibility import API_VERSION
from tercet.plugin_host.kinds import COMPONENT_KINDS, ComponentKind

TEMPLATES = resources.files("tercet.plugin_host") / "skeleton_templates"
# Lowercase words joined by single hyphens: one spelling for the component's name,
# from which the module, distribution and entry-point names follow.
VALID_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


class SkeletonError(TercetError):
    """A kind or name the generator refuses, or a directory it will not overwrite."""


def kind_slug(kind: ComponentKind) -> str:
    return kind.slug or kind.kind.replace(" ", "-")


KINDS_BY_SLUG: dict[str, ComponentKind] = {kind_slug(kind): kind for kind in COMPONENT_KINDS}


@dataclass(frozen=True)
class SkeletonNames:
    """Every name in a skeleton, from the one the user gave."""

    name: str  # the component's registered name: "shortest-first"
    module: str  # "tercet_shortest_first"
    distribution: str  # "tercet-shortest-first"
    entry_point: str  # the plugin's name: "shortest_first"
    class_name: str  # "ShortestFirst"

    @classmethod
    def of(cls, name: str) -> "SkeletonNames":
        if not VALID_NAME.fullmatch(name):
            raise SkeletonError(
                f"invalid plugin name {name!r}: use lowercase letters and digits in words joined by single "
                "hyphens, starting with a letter (for example 'shortest-first')"
            )
        bare = name.removeprefix("tercet-")
        return cls(
            name=name,
            module="tercet_" + bare.replace("-", "_"),
            distribution="tercet-" + bare,
            entry_point=bare.replace("-", "_"),
            class_name="".join(word.capitalize() for word in bare.split("-")),
        )


def skeleton_kind(slug: str) -> ComponentKind:
    try:
        return KINDS_BY_SLUG[slug]
    except KeyError:
        raise SkeletonError(f"unknown plugin kind {slug!r}; the kinds are: {', '.join(sorted(KINDS_BY_SLUG))}") from None


def render_skeleton(slug: str, name: str) -> dict[str, str]:
    """The skeleton's files: relative path -> text."""
    kind = skeleton_kind(slug)
    names = SkeletonNames.of(name)
    values = {**vars(names), **_kind_values(kind, names)}
    kind_dir = TEMPLATES / kind.registry

    def render(template) -> str:
        return Template(template.read_text()).substitute(values)

    values["about"] = render(kind_dir / "about.md.tmpl").strip()
    return {
        "pyproject.toml": render(TEMPLATES / "pyproject.toml.tmpl"),
        "README.md": render(TEMPLATES / "README.md.tmpl"),
        f"{names.module}.py": render(kind_dir / "plugin.py.tmpl"),
        f"tests/test_{names.module}.py": render(kind_dir / "test_plugin.py.tmpl"),
    }


def write_skeleton(slug: str, name: str, parent: Path) -> Path:
    """Write the skeleton into ``parent/NAME``, which must not exist yet; that directory."""
    files = render_skeleton(slug, name)  # refuses a bad kind or name before touching the disk
    names = SkeletonNames.of(name)
    installed = {entry_point.name for entry_point in metadata.entry_points(group="tercet")}
    if names.entry_point in installed:
        raise SkeletonError(f"a plugin named {names.entry_point!r} is installed already; choose another name")
    target = Path(parent) / name
    if target.exists():
        raise SkeletonError(f"{target} exists already; the skeleton is only ever written into a new directory")
    for relative, text in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def _kind_values(kind: ComponentKind, names: SkeletonNames) -> dict[str, str]:
    major = int(API_VERSION.split(".")[0])
    if kind.config_key is None:
        usage = f"Every installed {kind.kind} is used; nothing needs choosing."
    else:
        section, key = kind.config_key
        usage = (f'Choose it in tercet.toml,\n\n```toml\n[{section}]\n{key} = "{names.name}"\n```\n\n'
                 f"or with `tercet serve --set {section}.{key}={names.name}`.")
    return {
        "kind": kind.kind,
        "kind_slug": kind_slug(kind),
        "hook": kind.hook,
        "usage": usage,
        # Made for this major version of the plugin API, from the one it was generated with.
        "api_versions": f">={API_VERSION},<{major + 1}",
    }
