"""Output folders that appear complete or not at all, and never replace what they did not make.

Every command that writes a folder (a report, a pruning run, an exported checkpoint) goes
through ``OutputFolder``:

1. ``check()`` runs before the model loads: the target must be a folder (or absent) in a
   writable place, must not be, or hold, a protected path (the source model, an input
   file, the current folder), and must be empty unless ``force`` (replace it as a whole) or
   ``resume`` (continue the run it holds) is given.
2. ``writing(manifest)`` yields a work folder beside the target (``.NAME.partial`` for runs
   that can resume, a fresh ``.NAME.XXXX.tmp`` otherwise). Files are written there, each
   atomically. When the block ends normally the work folder is renamed onto the target
   (``publish_folder``): the target holds the complete new run, never a mix with older
   files. When it fails, the work folder is deleted, except that a resumable run keeps it
   when it holds progress and the failure was not the user's input (an interruption, a
   crash, out of memory): ``--resume`` continues from there.

The module is imported before the model loads, so it imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnlens.errors import AttnlensError, ConfigError
from attnlens.runs import folder_lock
from attnlens.runs.held_signals import HeldSignals
from attnlens.runs.io import (
    WORK_SUFFIX_BYTES,
    atomic_write_json,
    check_writable_target,
    process_umask,
)

MANIFEST_FILE = "manifest.json"
CHECKPOINT_DIR = "checkpoint"


# Durable renames ----------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# Publishing ---------------------------------------------------------------------------------
def is_empty_folder(path: Path) -> bool:
    return path.is_dir() and next(path.iterdir(), None) is None


def publish_folder(work: Path, target: Path, replace: bool = False) -> Path:
    """Rename the finished ``work`` folder onto ``target`` (both in the same parent).

    An absent or empty ``target`` is taken over; a non-empty one is swapped out as a whole
    and deleted when ``replace``, else refused (the work folder is kept and named).
    """
    _fsync_dir(work)
    if target.is_dir() and not is_empty_folder(target):
        if not replace:
            raise ConfigError(
                f"{target} was filled by something else while this run worked; its results "
                f"are in {work} (rename it yourself), and {target} is unchanged."
            )
        old = target.parent / f".{target.name}.old-{secrets.token_hex(4)}"
        os.rename(target, old)
        try:
            os.rename(work, target)
        except BaseException:
            os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        if target.is_dir():
            target.rmdir()
        os.rename(work, target)
    _fsync_dir(target.parent)
    return target


# What the CLI says when a run is interrupted --------------------------------------------------
@dataclass
class _Active:
    folder: OutputFolder | None = None
    note: str | None = None  # set when a run ended by an interruption or a crash


_ACTIVE = _Active()


def interrupt_note() -> str | None:
    """What the last interrupted ``OutputFolder`` kept (None when nothing was running)."""
    return _ACTIVE.note


# The folder ---------------------------------------------------------------------------------
class OutputFolder:
    """A command's output folder: checked early, written beside, published whole.

    ``option`` names the command-line option in messages (``--out``, ``--export``);
    ``protected`` are paths the folder must neither be nor contain (the source model,
    input files); ``resumable`` runs keep a fixed ``.NAME.partial`` work folder that
    ``resume=True`` continues.
    """

    def __init__(
        self,
        target: str | os.PathLike,
        *,
        force: bool = False,
        resume: bool = False,
        resumable: bool = False,
        option: str = "--out",
        protected: Sequence[tuple[str, str | os.PathLike]] = (),
    ) -> None:
        self.given = Path(target).expanduser()
        self.target = Path(os.path.abspath(self.given))
        if self.target.is_symlink() and self.target.is_dir():
            self.target = self.target.resolve()
        self.force, self.resume, self.resumable = force, resume and resumable, resumable
        self.option = option
        self.protected = [(what, Path(p)) for what, p in protected if p is not None]
        self.progress: str | None = None  # e.g. "a checkpoint after 32 of 43 sentences"
        self.work: Path | None = None
        self._created_parents: list[Path] = []
        self._checked = False
        self._same_run_in_target = False
        self._partial_progress = self._complete_target = False
        self._lock: Path | None = None  # the lock file held from check() to the end

    # Where things are ----------------------------------------------------------------------
    @property
    def partial(self) -> Path:
        """The fixed work folder of a resumable run."""
        return self.target.parent / f".{self.target.name}.partial"

    def saved_manifest(self) -> dict | None:
        """The manifest of the run this folder would continue: the partial one, else a
        complete one in the target; None when there is none."""
        folders = [self.partial, self.target] if self._partial_progress else [self.target]
        for folder in folders:
            path = folder / MANIFEST_FILE
            if path.is_file():
                try:
                    return json.loads(path.read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise ConfigError(
                        f"{path} is damaged ({exc}); cannot check what --resume would "
                        "continue; add --force (without --resume) to start over."
                    ) from exc
        return None

    @property
    def resumes_partial(self) -> bool:
        """The work folder starts with an earlier run's results (set by ``check``)."""
        return self.resume and (self._partial_progress or self._complete_target)

    @property
    def resumes_complete(self) -> bool:
        """--resume given on a folder that already holds this run, complete."""
        return self._complete_target

    def _target_manifest(self) -> dict | None:
        path = self.target / MANIFEST_FILE
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None

    # Checks before anything runs -----------------------------------------------------------
    def check(self) -> OutputFolder:
        """Refuse a target this run may not write (see the module docstring)."""
        _ACTIVE.note = None  # a note of an earlier command in this process no longer applies
        target, opt = self.target, self.option
        if target.exists() and not target.is_dir():
            raise ConfigError(f"{opt} {self.given} is a file; pass a folder (new or empty).")
        self._check_protected()
        # A writable place: no dangling link, names short enough for the work folder beside.
        check_writable_target(self.given, opt, added=WORK_SUFFIX_BYTES)
        self._lock = folder_lock.acquire(target, opt, self.given, clear_stale=self.force or
                                         self.resume, resumable=self.resumable)
        try:
            self._check_contents()
        except BaseException:
            self._release_lock()
            raise
        self._checked = True
        return self

    def _check_contents(self) -> None:
        """What the folder holds: an interrupted run, another run, files of the user."""
        target, opt = self.target, self.option
        # A partial folder without progress (killed before its first result) is not a run.
        has_partial = self._partial_progress = (
            self.resumable and self.partial.is_dir() and self.has_progress(self.partial))
        manifest = self._target_manifest() if self.resume and not has_partial else None
        self._complete_target = bool(manifest and manifest.get("complete"))
        if has_partial and not self.resume and not self.force:
            raise ConfigError(
                f"an interrupted run is in {self.partial}; add --resume to continue it, or "
                f"--force to delete it and start over."
            )
        if target.is_dir() and not is_empty_folder(target):
            if self.force or (self.resume and self._target_manifest() is not None):
                pass  # replaced at the end; a resumed run is checked by verify_manifest
            elif self.resume:
                raise ConfigError(
                    f"{opt} {self.given} holds no attnlens run to resume (no {MANIFEST_FILE}); "
                    "choose another folder, or add --force (without --resume) to replace it."
                )
            else:
                raise ConfigError(
                    f"{opt} {self.given} is not empty; choose a new folder, or add --force to "
                    "replace it as a whole (every file in it is deleted)."
                )

    def _check_protected(self) -> None:
        target = self.target.resolve()
        for what, path in self.protected:
            if not path.exists():
                continue
            held = path.resolve()
            if held == target or target in held.parents:
                verb = "is" if held == target else "holds"
                raise ConfigError(
                    f"{self.option} {self.given} {verb} {what} ({path}); attnlens never "
                    "replaces it: choose another folder."
                )
        cwd = Path.cwd().resolve()
        holds_cwd = target == cwd or target in cwd.parents or target == Path.home().resolve()
        if holds_cwd and target.is_dir() and not is_empty_folder(target):
            raise ConfigError(
                f"{self.option} {self.given} holds the current or home folder; attnlens "
                "writes into a new folder: choose one, e.g. --out report."
            )

    def verify_manifest(self, current: dict) -> None:
        """Refuse --resume when the saved run differs from this one (named in the message).

        The run continued is the partial one, else a complete one in the target; when a
        partial run is continued, a non-empty target must hold the same run (or --force).
        """
        if not self.resume:
            return
        from attnlens.runs.manifest import manifest_differences

        target_manifest = self._target_manifest()
        saved = self.saved_manifest()
        if saved is not None:
            differences = manifest_differences(saved, current)
            if differences:
                where = self.partial if self._partial_progress else self.given
                raise ConfigError(
                    f"--resume refused: {'; '.join(differences)} since the run in {where}; "
                    "rerun with the same inputs and options, or add --force without --resume "
                    "to start over."
                )
        if target_manifest is not None:
            self._same_run_in_target = not manifest_differences(target_manifest, current)
            if not self._same_run_in_target and not self.force:
                raise ConfigError(
                    f"{self.option} {self.given} holds another run than the one --resume "
                    f"continues in {self.partial}; add --force to replace it when the resumed "
                    "run ends, or choose another folder."
                )

    # Writing -------------------------------------------------------------------------------
    def _make_parents(self) -> None:
        missing = []
        parent = self.target.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise ConfigError(f"cannot create {path}: {exc.strerror}.") from exc
            self._created_parents.append(path)

    def _open_work(self) -> Path:
        self._make_parents()
        if self.resumable:
            partial = self.partial
            if partial.is_dir() and not (self.resume and self._partial_progress):
                shutil.rmtree(partial)  # --force, or a folder without progress: start over
            if self._complete_target:
                shutil.copytree(self.target, partial, symlinks=True)
            partial.mkdir(exist_ok=True)
            work = partial
        else:
            work = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".tmp",
                                         dir=self.target.parent))
        os.chmod(work, 0o777 & ~process_umask())
        return work

    def _discard(self, work: Path) -> None:
        shutil.rmtree(work, ignore_errors=True)
        self._remove_created_parents()

    def _remove_created_parents(self) -> None:
        for path in reversed(self._created_parents):
            try:
                path.rmdir()
            except OSError:
                break

    def has_progress(self, work: Path) -> bool:
        return any(p.name != MANIFEST_FILE for p in work.iterdir())

    @contextmanager
    def writing(self, manifest: dict | None = None) -> Iterator[Path]:
        """Yield the work folder; publish it onto the target when the block succeeds.

        Ctrl-C and SIGTERM are held back while the work folder is made and while it is
        published, so an interruption finds it either registered for clean-up or renamed
        into place (a signal held back is raised as soon as that step is over).
        """
        if not self._checked:
            self.check()
        try:
            yield from self._write(manifest)
        finally:
            self._release_lock()  # the run is over, published or not

    def _release_lock(self) -> None:
        folder_lock.release(self._lock)
        self._lock = None

    def _write(self, manifest: dict | None) -> Iterator[Path]:
        work = None
        held = HeldSignals()
        try:
            if self._lock is None:  # its parent did not exist when checked: lock it now
                self._make_parents()
                self._lock = folder_lock.acquire(
                    self.target, self.option, self.given, clear_stale=self.force or self.resume,
                    resumable=self.resumable)
            work = self.work = self._open_work()
            if manifest is not None:
                atomic_write_json(work / MANIFEST_FILE, {**manifest, "complete": False})
            _ACTIVE.folder, _ACTIVE.note = self, None
            held.release()  # an interruption from here on is handled below
            yield work
        except BaseException as exc:
            held.release()
            keep = (work is not None and self.resumable and not isinstance(exc, AttnlensError)
                    and work.is_dir() and self.has_progress(work))
            if keep:
                what = self.progress or "the progress so far"
                _ACTIVE.note = f"kept {what} in {work}"
            else:
                self._release_lock()  # before the folders it may sit in are removed
                if work is not None:
                    self._discard(work)
                else:
                    self._remove_created_parents()
                _ACTIVE.note = f"nothing was written ({self.given} is unchanged)"
            raise
        finally:
            _ACTIVE.folder = None
        held = HeldSignals()
        try:
            shutil.rmtree(work / CHECKPOINT_DIR, ignore_errors=True)
            if manifest is not None:
                atomic_write_json(work / MANIFEST_FILE, {**manifest, "complete": True})
            replace = self.force or (self.resume and self._same_run_in_target)
            publish_folder(work, self.target, replace=replace)
            self.work = None
        finally:
            held.release()


def active_folder() -> OutputFolder | None:
    """The OutputFolder being written now (its ``progress`` feeds the interrupt message)."""
    return _ACTIVE.folder
