"""``tercet plugin new``: a skeleton for every kind of the table, refusals, and real installs."""

from __future__ import annotations

import importlib
import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tercet.cli import main
from tercet.plugin_host.kinds import COMPONENT_KINDS
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugin_host.skeleton import (
    KINDS_BY_SLUG,
    TEMPLATES,
    SkeletonError,
    SkeletonNames,
    render_skeleton,
    write_skeleton,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ALL_KINDS = sorted(KINDS_BY_SLUG)


def test_the_kinds_are_the_table_of_component_kinds_each_with_its_templates():
    assert sorted(kind.kind for kind in KINDS_BY_SLUG.values()) == sorted(kind.kind for kind in COMPONENT_KINDS)
    assert "scheduling-policy" in KINDS_BY_SLUG and "message-type" in KINDS_BY_SLUG and "route" in KINDS_BY_SLUG
    for kind in COMPONENT_KINDS:
        for template in ("plugin.py.tmpl", "test_plugin.py.tmpl", "about.md.tmpl"):
            assert (TEMPLATES / kind.registry / template).is_file(), f"{kind.kind}: no {template}"


def test_names_follow_from_the_one_given():
    assert SkeletonNames.of("shortest-first") == SkeletonNames(
        name="shortest-first", module="tercet_shortest_first", distribution="tercet-shortest-first",
        entry_point="shortest_first", class_name="ShortestFirst",
    )
    assert SkeletonNames.of("tercet-acme").distribution == "tercet-acme"  # not tercet-tercet-acme


@pytest.fixture
def import_from(monkeypatch):
    """Import a module from a folder for one test; it is forgotten afterwards."""
    imported = []

    def import_module(folder: Path, name: str):
        monkeypatch.syspath_prepend(str(folder))
        imported.append(name)
        return importlib.import_module(name)

    yield import_module
    for name in imported:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("slug", ALL_KINDS)
def test_each_skeleton_is_a_distribution_whose_module_registers_its_component(slug, tmp_path, import_from):
    kind = KINDS_BY_SLUG[slug]
    target = write_skeleton(slug, f"kit-demo-{slug}", tmp_path)
    names = SkeletonNames.of(f"kit-demo-{slug}")
    files = sorted(str(path.relative_to(target)) for path in target.rglob("*") if path.is_file())
    assert files == sorted(["README.md", "pyproject.toml", f"{names.module}.py", f"tests/test_{names.module}.py"])
    for path in target.rglob("*"):
        if path.is_file():
            assert "${" not in path.read_text(), f"{path.name}: a placeholder left"
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == names.distribution
    assert project["entry-points"]["tercet"] == {names.entry_point: names.module}
    assert "tercet" in project["dependencies"]
    compile((target / f"tests/test_{names.module}.py").read_text(), "test", "exec")
    assert "tercet_" in (target / f"tests/test_{names.module}.py").read_text()  # uses tercet.testing's fixtures
    readme = (target / "README.md").read_text()
    assert f"tercet plugin new {slug} kit-demo-{slug}" in readme
    if kind.config_key:
        assert f"{kind.config_key[0]}.{kind.config_key[1]}=kit-demo-{slug}" in readme

    module = import_from(target, names.module)
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager(load_entry_points=False, extra_plugins=[module]))
    registered = registries.by_name[kind.registry].names()
    expected = {
        "message_types": f"{names.module}.{names.entry_point}_req",  # a wire tag
        "model_architectures": f"{names.class_name}ForCausalLM",  # the name a config.json gives
        "http_routes": f"/kit-demo-{slug}",  # a route is registered under its path
    }.get(kind.registry, f"kit-demo-{slug}")
    assert registered == [expected]


def test_the_message_type_skeleton_brings_a_handler_and_a_route():
    module_text = render_skeleton("message-type", "queue-lengths")["tercet_queue_lengths.py"]
    assert "def register_message_handlers(component, register)" in module_text
    assert "def register_http_routes(register)" in module_text
    assert 'ROUTE = "/queue-lengths"' in module_text


@pytest.mark.parametrize("name", ["Shortest", "shortest_first", "1st", "-x", "x-", "a--b", "", "a b", "ü"])
def test_an_invalid_name_is_refused(name, tmp_path):
    with pytest.raises(SkeletonError, match="invalid plugin name"):
        write_skeleton("scheduling-policy", name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_kind_is_refused_listing_the_kinds(capsys, tmp_path):
    assert main(["plugin", "new", "tokenizer", "acme", "--directory", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "unknown plugin kind 'tokenizer'; the kinds are: " + ", ".join(ALL_KINDS) in error
    assert list(tmp_path.iterdir()) == []


def test_an_existing_directory_is_never_overwritten(capsys, tmp_path):
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "mine.txt").write_text("keep me")
    assert main(["plugin", "new", "serializer", "acme", "--directory", str(tmp_path)]) == 1
    assert "exists already" in capsys.readouterr().err
    assert [path.name for path in (tmp_path / "acme").iterdir()] == ["mine.txt"]


def test_the_name_of_an_installed_plugin_is_refused(tmp_path):
    with pytest.raises(SkeletonError, match="'fcfs_policy' is installed already"):
        write_skeleton("scheduling-policy", "fcfs-policy", tmp_path)


def test_the_command_says_what_it_wrote(capsys, tmp_path):
    assert main(["plugin", "new", "transport", "acme-pipes", "--directory", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / 'acme-pipes'}" in capsys.readouterr().out
    assert (tmp_path / "acme-pipes" / "tercet_acme_pipes.py").is_file()


# -- installed with pip, as a plugin author would ------------------------------------------------


@pytest.fixture(scope="module")
def throwaway_venv(tmp_path_factory) -> Path:
    """A venv whose own site-packages is empty, seeing this environment's packages (tercet
    among them) behind it: what a skeleton installs there leaves this environment alone."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = venv / "bin" / "python"
    (own_site,) = json.loads(subprocess.run(
        [str(python), "-c", "import json, site; print(json.dumps(site.getsitepackages()[:1]))"],
        check=True, capture_output=True, text=True, timeout=60).stdout)
    # A venv made from a venv sees the base interpreter's packages, not this one's: add them,
    # with their .pth files (tercet's editable install is one), ahead of the base's.
    ours = [path for path in site.getsitepackages() if path != own_site]
    (Path(own_site) / "tercet_test_parent_env.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({path!r})" for path in ours) + "\n")
    return python


@pytest.fixture(scope="module")
def installed_skeletons(throwaway_venv, tmp_path_factory) -> dict[str, Path]:
    parent = tmp_path_factory.mktemp("skeletons")
    skeletons = {slug: write_skeleton(slug, f"kit-{slug}", parent) for slug in ALL_KINDS}
    editable = [argument for path in skeletons.values() for argument in ("-e", str(path))]
    # Build isolation: each skeleton is built with the setuptools its pyproject asks for.
    subprocess.run([str(throwaway_venv), "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps",
                    *editable], check=True, timeout=600)
    return skeletons


def run_in(venv_python: Path, *arguments, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(venv_python), *arguments], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.e2e
def test_installed_skeletons_show_in_tercet_plugins(throwaway_venv, installed_skeletons):
    listing = run_in(throwaway_venv, "-m", "tercet", "plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    described = {plugin["name"]: plugin for plugin in json.loads(listing.stdout)}
    for slug in ALL_KINDS:
        names = SkeletonNames.of(f"kit-{slug}")
        plugin = described[names.entry_point]
        assert (plugin["distribution"], plugin["module"], plugin["disabled"]) == (names.distribution, names.module, False)
        kinds = {KINDS_BY_SLUG[slug].kind}
        if slug == "message-type":  # a message type comes with its route
            kinds.add(KINDS_BY_SLUG["route"].kind)
        assert {item["kind"] for item in plugin["registers"]} == kinds
    # Nothing leaked into this environment.
    assert SkeletonNames.of("kit-scheduling-policy").entry_point not in {
        name for name, _ in create_plugin_manager().list_name_plugin()}


@pytest.mark.e2e
@pytest.mark.parametrize("slug", ALL_KINDS)
def test_an_installed_skeleton_passes_its_own_tests(throwaway_venv, installed_skeletons, slug):
    result = run_in(throwaway_venv, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=installed_skeletons[slug])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout and "skipped" not in result.stdout
