"""/start_profile's body: where the traces may go, and how long the recording lasts."""

from __future__ import annotations

import os

import pytest

from tercet.errors import RequestError
from tercet.http.control.profile_api import ProfilePlan, checked_output_dir


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "profiles"
    root.mkdir()
    return root


def test_a_relative_directory_lands_inside_the_root(root):
    assert checked_output_dir("run-1", str(root)) == str(root / "run-1")
    assert checked_output_dir("a/b/./c/", str(root)) == str(root / "a" / "b" / "c")


@pytest.mark.parametrize("requested, words", [
    ("/tmp/elsewhere", "not an absolute path"),
    ("~/elsewhere", "not an absolute path"),
    ("../elsewhere", "must not contain '..'"),
    ("a/../../elsewhere", "must not contain '..'"),
    ("a/..", "must not contain '..'"),
    ("a\\..\\b", "backslash"),
    ("a\0b", "without NUL"),
    ("", "relative to [server] profile_dir"),
    (7, "relative to [server] profile_dir"),
    ("x" * 2000, "at most 1024 characters"),
])
def test_paths_that_could_lead_elsewhere_are_refused(root, requested, words):
    with pytest.raises(RequestError) as refused:
        checked_output_dir(requested, str(root))
    assert words in refused.value.message and refused.value.status_code == 400


def test_a_symbolic_link_leading_out_of_the_root_is_refused(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "inner").mkdir()
    (root / "good").symlink_to(root / "inner")
    for requested in ("link", "link/deeper"):
        with pytest.raises(RequestError, match="through a symbolic link"):
            checked_output_dir(requested, str(root))
    # A link that stays inside is fine.
    assert checked_output_dir("good", str(root)) == str(root / "good")


def test_the_plan_reads_each_field_and_refuses_bad_ones(root):
    plan = ProfilePlan.of({"output_dir": "r", "activities": ["CPU"], "seconds": 2}, str(root))
    assert (plan.output_dir, plan.activities, plan.seconds, plan.num_steps) == (str(root / "r"), ["CPU"], 2.0, None)
    steps = ProfilePlan.of({"num_steps": 5, "timeout": 9}, str(root))
    assert steps.num_steps == 5 and steps.timeout == 9.0 and steps.activities is None
    assert os.path.dirname(steps.output_dir) == str(root)  # named after the date and time
    for body, param in (
        ({"seconds": 1, "num_steps": 2}, "seconds"),
        ({"seconds": 0}, "seconds"),
        ({"seconds": 1e9}, "seconds"),
        ({"num_steps": 1.5}, "num_steps"),
        ({"num_steps": True}, "num_steps"),
        ({"num_steps": 0}, "num_steps"),
        ({"activities": ["GPU"]}, "activities"),
        ({"activities": []}, "activities"),
        ({"activities": ["CPU", "CPU"]}, "activities"),
        ({"activities": "CPU"}, "activities"),
        ({"timeout": -1}, "timeout"),
    ):
        with pytest.raises(RequestError) as refused:
            ProfilePlan.of(body, str(root))
        assert refused.value.param == param, body
    assert os.listdir(root) == []  # checking writes nothing
