"""The gRPC contract's checks (tools/protos.py, `make proto-check`): buf lint, buf breaking
against the released protos, and protos/VERSION moving with every change of a .proto file.

The history cases run in throwaway git repositories under tmp_path, never in this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tools import protos

TIMELINE = "protos/agora/messaging/v1/timeline_service.proto"
FIELD = "bool include_archive = 6;"
# A number no field of the request has used (the renumbering must not also collide).
RENUMBERED = "bool include_archive = 20;"
# An addition: a new field with a new number (what a MINOR release may do).
ADDED = "bool include_archive = 6;\n  bool newest_first = 20;"


def copy_protos(directory: Path) -> Path:
    """protos/ (buf.yaml and VERSION included) copied to directory/protos; returns directory."""
    shutil.copytree(ROOT / "protos", directory / "protos")
    return directory


def edit(root: Path, old: str, new: str, path: str = TIMELINE) -> None:
    file = root / path
    text = file.read_text()
    assert old in text, f"{path} no longer has {old!r}: pick another field for this test"
    file.write_text(text.replace(old, new, 1))


def test_buf_lint_passes() -> None:
    result = protos.lint()
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_fails_a_renumbered_field_and_passes_the_unmodified_copy(
    tmp_path: Path,
) -> None:
    released = copy_protos(tmp_path / "released") / "protos"
    work = copy_protos(tmp_path / "work")

    unmodified = protos.breaking(str(released), root=work)
    assert unmodified.returncode == 0, unmodified.stdout + unmodified.stderr

    edit(work, FIELD, RENUMBERED)
    renumbered = protos.breaking(str(released), root=work)
    assert renumbered.returncode != 0
    assert 'field "6" with name "include_archive"' in renumbered.stdout, renumbered.stdout


def test_buf_breaking_lets_a_new_field_through(tmp_path: Path) -> None:
    released = copy_protos(tmp_path / "released") / "protos"
    work = copy_protos(tmp_path / "work")
    edit(work, FIELD, ADDED)
    result = protos.breaking(str(released), root=work)
    assert result.returncode == 0, result.stdout + result.stderr


def test_this_checkout_is_compatible_with_the_released_protos() -> None:
    found = protos.baselines()
    assert found, "no baseline to compare with"
    for baseline in found:
        result = protos.breaking(baseline.input)
        assert result.returncode == 0, f"against {baseline.what}:\n{result.stdout}{result.stderr}"


def test_version_was_bumped_with_every_change_of_the_protos() -> None:
    assert protos.version_problems() == []


# --- the same checks on a history of commits ---------------------------------------------------

# A repository of its own: no user or system git configuration (hooks, signing) applies.
_GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
_IDENTITY = ["-c", "user.name=agora tests", "-c", "user.email=tests@agora.invalid"]


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *_IDENTITY, *args], cwd=repo, env=_GIT_ENV, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "log", "-1", "--format=%H")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose first commit is today's protos/, released as 1.0.0 (the tests bump
    from there, whatever the project's version now is)."""
    monkeypatch.delenv("BUF_BREAKING_AGAINST", raising=False)
    repo = copy_protos(tmp_path / "repo")
    (repo / "protos/VERSION").write_text("1.0.0\n")
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "protos")
    return repo


def failures_against_history(repo: Path) -> dict[str, int]:
    """buf breaking's exit code against each baseline the check picks."""
    return {b.what: protos.breaking(b.input, root=repo).returncode for b in protos.baselines(repo)}


def test_an_uncommitted_renumbering_fails_against_head(repo: Path) -> None:
    edit(repo, FIELD, RENUMBERED)
    results = failures_against_history(repo)
    assert [code != 0 for what, code in results.items() if what.startswith("HEAD")] == [True]


def test_committed_renumbering_fails_on_a_clean_clone_under_later_changes(repo: Path) -> None:
    first = git(repo, "log", "-1", "--format=%H")
    edit(repo, FIELD, RENUMBERED)
    edit(repo, "1.0.0", "1.1.0", "protos/VERSION")
    renumbering = commit(repo, "renumber a field")
    # Later commits, one of them a compatible change of the protos, do not hide it.
    edit(repo, RENUMBERED, RENUMBERED + "\n  bool newest_first = 11;")
    edit(repo, "1.1.0", "1.2.0", "protos/VERSION")
    addition = commit(repo, "add a field")
    (repo / "README").write_text("later\n")
    commit(repo, "unrelated")

    baselines = protos.baselines(repo)
    assert [b.input.split("#ref=")[1].split(",")[0] for b in baselines[1:]] == [renumbering, first]
    assert addition[:12] in baselines[1].what
    assert renumbering[:12] in baselines[2].what
    results = failures_against_history(repo)
    assert list(results.values()) == [0, 0, 100], results
    assert protos.version_problems(repo) == []


def test_a_committed_proto_change_without_a_version_bump_is_named(repo: Path) -> None:
    edit(repo, FIELD, ADDED)
    change = commit(repo, "add a field")
    problems = protos.version_problems(repo)
    assert problems
    assert change[:7] in problems[0]
    assert "add a field" in problems[0]

    edit(repo, "1.0.0", "1.1.0", "protos/VERSION")
    commit(repo, "release 1.1.0")
    assert protos.version_problems(repo) == []
    assert list(failures_against_history(repo).values()) == [0, 0]


def test_an_uncommitted_proto_change_needs_a_bump_that_moves_forward(repo: Path) -> None:
    (repo / "protos/agora/messaging/v1/new.proto").write_text(
        'syntax = "proto3";\n\npackage agora.messaging.v1;\n'
    )
    problems = protos.version_problems(repo)
    assert problems
    assert "protos/agora/messaging/v1/new.proto" in problems[0]
    assert "still 1.0.0" in problems[0]

    edit(repo, "1.0.0", "0.9.0", "protos/VERSION")
    assert "only moves forward" in "\n".join(protos.version_problems(repo))

    edit(repo, "0.9.0", "1.1.0", "protos/VERSION")
    assert protos.version_problems(repo) == []


def test_a_shallow_clone_fetches_the_history_it_compares_with(repo: Path, tmp_path: Path) -> None:
    edit(repo, FIELD, RENUMBERED)
    edit(repo, "1.0.0", "1.1.0", "protos/VERSION")
    commit(repo, "renumber a field")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    assert (clone / ".git" / "shallow").exists()

    assert list(failures_against_history(clone).values()) == [0, 100]
    assert not (clone / ".git" / "shallow").exists()


def test_a_shallow_clone_that_cannot_fetch_says_what_to_do(repo: Path, tmp_path: Path) -> None:
    (repo / "README").write_text("second\n")
    commit(repo, "second")  # a clone of depth 1 is shallow only with history beyond it
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    git(clone, "remote", "remove", "origin")
    with pytest.raises(protos.ProtoError, match=r"shallow clone.*git fetch --unshallow"):
        protos.baselines(clone)


def test_no_git_checkout_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(protos.ProtoError, match="BUF_BREAKING_AGAINST"):
        protos.baselines(copy_protos(tmp_path / "export"))
