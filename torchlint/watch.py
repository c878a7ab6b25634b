"""``torchlint --watch``: check, then check again whenever a file the check would read, or the
configuration, changes. It polls modification times and sizes, so it needs no file-system
notification library; Ctrl-C ends it."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from torchlint.config import ConfigError
from torchlint.discovery import discover
from torchlint.runner import display_path

POLL_SECONDS = 0.5

Snapshot = dict[Path, tuple[int, int]]


def snapshot(paths: list[Path], settings) -> Snapshot:
    """The (modification time, size) of every file a check of ``paths`` would read, and of the
    configuration file. Discovering anew each time sees files that were added or removed."""
    files = discover(paths, settings, lambda message: None)
    if settings.config_path is not None:
        files.append(settings.config_path)
    state: Snapshot = {}
    for path in files:
        try:
            status = path.stat()
        except OSError:  # removed since it was discovered: the next poll sees it gone
            continue
        state[path] = (status.st_mtime_ns, status.st_size)
    return state


def changed_paths(before: Snapshot, after: Snapshot) -> list[Path]:
    """Files added, removed or modified between two snapshots, in a stable order."""
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def _describe(changes: list[Path]) -> str:
    more = f" and {len(changes) - 1} more" if len(changes) > 1 else ""
    return f"{display_path(changes[0])}{more}"


def watch(paths: list[Path], settings, resolve: Callable[[], object], check: Callable[[object], int],
          notify: Callable[[str], None], clear: Callable[[], None], poll_seconds: float = POLL_SECONDS) -> int:
    """Run ``check(settings)`` now and after every change until Ctrl-C, which ends it with exit 0.
    ``clear()`` comes before each check (a terminal's screen), then ``notify`` gets the watch's
    own messages, each with the time, as Ruff's watch mode shows them. The snapshot is taken
    before each check reads the files, so that an edit made while it runs is not missed (the
    files ``--fix`` writes cause one more check, which finds nothing left to fix)."""
    def say(message: str) -> None:
        notify(f"[{datetime.now():%H:%M:%S}] {message}")

    try:
        clear()
        while True:
            before = snapshot(paths, settings)
            check(settings)
            say("Watching for file changes (Ctrl-C to stop).")
            settings, changes = _wait_for_change(paths, settings, before, resolve, say, poll_seconds)
            clear()
            say(f"File change detected: {_describe(changes)}.")
    except KeyboardInterrupt:
        return 0


def _wait_for_change(paths, settings, before: Snapshot, resolve, say, poll_seconds: float):
    """Poll until something changes; then the settings for the next check (read again, since the
    change may have been the configuration's) and what changed. A configuration that no longer
    reads (being edited) is reported, and the wait goes on."""
    while True:
        time.sleep(poll_seconds)
        after = snapshot(paths, settings)
        changes = changed_paths(before, after)
        if changes:
            try:
                return resolve(), changes
            except ConfigError as error:
                say(f"File change detected: {_describe(changes)}. {error}")
        before = after
