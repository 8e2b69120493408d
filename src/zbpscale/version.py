"""Which zbpscale this is: the package version, and the git commit when the package runs from a clone.

Read from files, never by running git (a compute node may have no git, and a trainer should not fork for this):
the clone is the folder two levels above the package (src layout: <clone>/src/zbpscale) when it holds zbpscale's
pyproject.toml and a `.git` (a folder, or a worktree's `gitdir:` file); then its HEAD, and the branch it names (a
loose ref or packed-refs). A wheel install is no clone, even inside some other checkout (a venv in a project):
None. Anything missing or unreadable is None, never an error.
"""

from __future__ import annotations

from pathlib import Path

from zbpscale import __version__


def version() -> str:
    """The version of the running package's code (zbpscale.__version__)."""
    return __version__


def git_revision(package: Path | None = None) -> str | None:
    """The commit checked out in the clone the package (or `package`, its folder) runs from; None otherwise."""
    package = Path(package or Path(__file__).resolve().parent)
    clone = package.parent.parent
    try:
        ours = package.parent.name == "src" and 'name = "zbpscale"' in (clone / "pyproject.toml").read_text()
        return _head(clone / ".git") if ours and (clone / ".git").exists() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _head(dot_git: Path) -> str | None:
    git_dir = dot_git
    if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = dot_git.read_text().strip()
        if not text.startswith("gitdir:"):
            return None
        git_dir = (dot_git.parent / text[len("gitdir:"):].strip()).resolve()
    head = (git_dir / "HEAD").read_text().strip()
    if not head.startswith("ref:"):
        return head or None  # detached: the commit itself
    ref = head[len("ref:"):].strip()
    common = git_dir
    if (git_dir / "commondir").is_file():  # a worktree's branches live in the main repository's folder
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for folder in dict.fromkeys((git_dir, common)):
        loose = folder / ref
        if loose.is_file():
            return loose.read_text().strip() or None
        packed = folder / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and not line.startswith(("#", "^")):
                    return sha
    return None
