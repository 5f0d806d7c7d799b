"""Where the commands' reports go: `--json PATH` and `--plot PATH`, one convention.

`--json PATH` writes the JSON report to a file, and `--json -` to standard output
(pip's `--report -`). A file is written whole or not at all: into a temporary file
beside it, renamed over it once complete, so that an interrupt or a full disk never
leaves half a report, and an earlier report stays until the new one is whole. When
the JSON goes to standard output, standard output holds nothing else: whatever the
user's code prints while we run it (a scanned module at import, a profiled program)
goes to standard error, at the level of the file descriptor, so that a C library's
or a subprocess's output is moved too.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator

__all__ = [
    "STDOUT",
    "is_stdout",
    "stdout_to_stderr",
    "unwritable",
    "write_atomically",
    "write_text",
]

STDOUT = "-"


def is_stdout(path: str | None) -> bool:
    return path == STDOUT


def unwritable(path: str) -> str | None:
    """Why `path` can't be written, or `None`. Checked before a long run, so that a
    typo fails at once instead of after it (and `profile` keeps its exit code)."""
    if is_stdout(path):
        return None
    if os.path.isdir(path):
        return f"{path!r} is a directory"
    existed = os.path.exists(path)
    try:
        # Append mode: an existing file is left as it is until we write it.
        with open(path, "a"):
            pass
    except OSError as e:
        return f"can't write {path!r}: {e.strerror or e}"
    if not existed:
        os.remove(path)
    return None


def write_atomically(path: str, write: Callable[[str], object]) -> None:
    """Call `write(temporary_path)`, then put the file it wrote at `path`.

    The temporary file sits in `path`'s folder (so that the rename is atomic) and
    ends with `path`'s suffix (matplotlib picks the image format from it). If
    `write` raises, `KeyboardInterrupt` included, the temporary file is removed and
    `path` is left as it was.
    """
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(
        dir=folder, prefix=f".{name}.", suffix=os.path.splitext(name)[1]
    )
    os.close(fd)
    try:
        write(tmp)
        if os.path.exists(path):
            # Keep the permissions of the file we replace, as an editor does.
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """`text` to the file `path`, whole or not at all, or to standard output for
    `-`."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    write_atomically(path, write)


@contextlib.contextmanager
def stdout_to_stderr(when: bool = True) -> Iterator[None]:
    """While the block runs, what is written to standard output goes to standard
    error: `sys.stdout`, and file descriptor 1 when it has one. With `when` false,
    nothing changes."""
    if not when:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        fd = sys.stdout.fileno()
        err = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = err = None  # pytest's capture, a notebook: Python-level only
    saved = None if fd is None else os.dup(fd)
    stdout = sys.stdout
    try:
        if saved is not None:
            os.dup2(err, fd)
        sys.stdout = sys.stderr
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stdout = stdout
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
