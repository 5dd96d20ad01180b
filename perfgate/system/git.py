"""git, as the gate drives it: a project's repository, a ref's commit, the base of a pull request,
a commit checked out into a temporary worktree (the user's checkout never touched), and
``project_checkout``: the user's project as another commit has it, ready to run beside the
checkout (the confirmation's base, ``perfgate ab``'s sides, ``perfgate bisect``'s commits).

``pull_request_base`` finds what a pull request's job compares with: the merge-base of HEAD with
the branch it merges into (``$GITHUB_BASE_REF`` on GitHub Actions, fetched as ``origin/<branch>``).
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from perfgate.errors import ConfigError

#: Seconds a git command may take (a worktree of a large repository takes a while).
GIT_TIMEOUT_S = 300
#: The variable GitHub Actions sets to the target branch of a pull request's job.
BASE_REF_VARIABLE = "GITHUB_BASE_REF"


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``'s output; ConfigError naming the command and git's own words."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"git {' '.join(args)} in {repo} failed: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def repo_root(path: Path) -> Path:
    """The top of the git checkout that holds ``path``."""
    return Path(git(path, "rev-parse", "--show-toplevel"))


def resolve_ref(repo: Path, ref: str) -> str:
    """The commit id of ``ref`` in ``repo`` (ConfigError naming the ref when unknown)."""
    try:
        return git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    except ConfigError as exc:
        raise ConfigError(f"option --base/--head: unknown git ref {ref!r} in {repo} ({exc})") from None


def head_state(repo: Path) -> tuple[str, bool]:
    """HEAD's commit and whether the checkout has uncommitted changes to tracked files."""
    return git(repo, "rev-parse", "HEAD"), bool(git(repo, "status", "--porcelain", "--untracked-files=no"))


def merge_base(repo: Path, commit: str) -> str | None:
    """The merge-base of HEAD with ``commit`` (None when they share no commit)."""
    try:
        return git(repo, "merge-base", "HEAD", commit)
    except ConfigError:
        return None


def pull_request_base(repo: Path, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(the merge-base commit of HEAD with a pull request's target branch, how it was found), from
    ``$GITHUB_BASE_REF``: ``origin/<branch>`` when the checkout has it, else ``<branch>``; None
    outside a pull request's job. ConfigError when the branch is not in the checkout (a shallow
    clone: ``actions/checkout`` needs ``fetch-depth: 0``)."""
    branch = env.get(BASE_REF_VARIABLE, "").strip()
    if not branch:
        return None
    for ref in (f"origin/{branch}", branch):
        try:
            target = git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
        except ConfigError:
            continue
        try:
            return git(repo, "merge-base", "HEAD", target), f"the merge-base of HEAD with {ref} ({BASE_REF_VARIABLE})"
        except ConfigError:
            raise ConfigError(f"environment variable {BASE_REF_VARIABLE}: HEAD and {ref} share no commit in "
                              f"{repo} (a shallow clone? check out with fetch-depth: 0)") from None
    raise ConfigError(f"environment variable {BASE_REF_VARIABLE}={branch}: neither origin/{branch} nor {branch} is "
                      f"in {repo} (check out with fetch-depth: 0, or fetch the branch)")


@contextlib.contextmanager
def git_worktree(repo: Path, ref: str, dest: Path) -> Iterator[Path]:
    """``git worktree add --detach dest ref`` for the duration of the block, removed afterwards."""
    commit = resolve_ref(repo, ref)
    git(repo, "worktree", "add", "--detach", str(dest), commit)
    try:
        yield dest
    finally:
        for args in (("worktree", "remove", "--force", str(dest)), ("worktree", "prune")):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S)


@contextlib.contextmanager
def project_checkout(repo: Path, ref: str, project: Path, keep_out: Collection[Path] = (),
                     label: str = "base") -> Iterator[Path]:
    """``project`` (a folder of the checkout at ``repo``) as ``ref`` has it, for the block, removed
    afterwards: a worktree of ``ref`` beside the repository (``../.NAME-perfgate-LABEL-*``; in the
    temporary folder where the repository's folder cannot be written), so that a path a workload
    reaches outside the repository (the zoo's vae reads ``../data``) is the one the checkout
    reaches, with each top-level entry of ``project`` that git ignores (data, checkpoints, a
    virtual environment) linked in, but ``keep_out`` (perfgate's own folders)."""
    top = repo.resolve()
    rel = project.resolve().relative_to(top)
    try:
        holder = dest = Path(tempfile.mkdtemp(dir=top.parent, prefix=f".{top.name}-perfgate-{label}-"))
    except OSError:
        holder = Path(tempfile.mkdtemp(prefix=f"perfgate-{label}-"))
        dest = holder / top.name
    try:
        with git_worktree(top, ref, dest) as tree:
            link_ignored(project, tree / rel, keep_out)
            yield tree / rel
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def link_ignored(source: Path, dest: Path, keep_out: Collection[Path] = ()) -> None:
    """Link each top-level entry of ``source`` that git ignores into ``dest`` (where ``dest`` has
    none), but those in ``keep_out``: a workload's data is rarely committed."""
    listed = git(source, "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "--", ".")
    own = {p.resolve() for p in keep_out}
    for line in listed.splitlines():
        top = line.strip().rstrip("/").split("/")[0]
        entry = source / top
        if not top or (dest / top).exists() or (dest / top).is_symlink() or not entry.exists():
            continue
        if any(entry.resolve() == p or entry.resolve() in p.parents for p in own):
            continue
        (dest / top).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
