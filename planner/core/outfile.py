"""Writing the files the CLI produces, safely (every -o, --svg and --plans-dir file).

- A file is never truncated in place: it is written to a temporary file in the same folder,
  flushed to disk (fsync) and renamed over the target (os.replace), so an interruption leaves
  either the old file or the new one, never a torn one.
- A target that is a symbolic link is refused (BadInput): planner never writes through a link
  onto whatever it points to. Exception: a link to a character device or FIFO (/dev/stdout, a
  pipe, /dev/null) is written through, as are such devices themselves (they cannot be renamed
  over, and renaming over /dev/null as root would replace it).
- A target that is the same file as one of the command's inputs (`export p.json -o p.json`,
  hard links included) is refused before anything is written.
- `exclusive_lock(path)`: a non-blocking lock on the sidecar file `<path>.lock`, so two
  processes (two sweeps) never write one file at the same time; a link there is refused.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from .errors import BadInput

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; exclusive_lock locks nothing
    fcntl = None  # type: ignore[assignment]


def _is_stream(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _stream_target(path: str) -> bool:
    """True for a character device or FIFO (or a link to one): written through, not replaced."""
    try:
        return _is_stream(os.stat(path).st_mode)
    except OSError:
        return False


def input_paths(*names: str | Iterable[str] | None) -> list[str]:
    """The input names of a command (single names or lists of them) as one flat list."""
    out: list[str] = []
    for name in names:
        if name:
            out.extend([name] if isinstance(name, str) else [n for n in name if n])
    return out


def check_output(path: str, inputs: Iterable[str] = (), where: str | None = None) -> None:
    """Refuse a target that is a directory, a symbolic link (but to a device or FIFO), a
    read-only file, or the same file as one of `inputs`. Nothing is written."""
    where = where or path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return  # a new file cannot be an input, nor a link
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", where) from None
    if stat.S_ISLNK(info.st_mode):
        if _stream_target(path):
            return
        raise BadInput(f"is a symbolic link (to {os.readlink(path)}); planner does not write through links: "
                       "remove it or name the file itself", where)
    if stat.S_ISDIR(info.st_mode):
        raise BadInput("cannot write: is a directory", where)
    if _is_stream(info.st_mode):
        return
    if not os.access(path, os.W_OK):
        raise BadInput("cannot write: Permission denied", where)
    for name in inputs:
        try:
            same = os.path.samefile(path, name)
        except (OSError, ValueError):
            continue  # not a file (a catalog name), or unreadable: not this file
        if same:
            raise BadInput(f"is also an input of this command ({name}); refusing to overwrite it", where)


def open_temp(path: str, *, binary: bool = False, newline: str | None = None) -> tuple[IO, Path]:
    """A new file next to `path` (with the umask's permissions), open for writing, and its
    path; `commit` renames it over `path`, `discard` deletes it."""
    target = Path(path)
    folder = target.parent
    for _ in range(100):
        tmp = folder / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        return (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline=newline, encoding="utf-8")), tmp
    raise FileExistsError(f"no free temporary name next to {target}")


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every system can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def commit(handle: IO, tmp: Path, path: str) -> None:
    """Flush and fsync `handle` (the temporary file `tmp`), then rename it over `path`. The
    handle stays open (appending to it appends to `path`)."""
    handle.flush()
    os.fsync(handle.fileno())
    target = Path(path)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        pass
    else:
        os.chmod(tmp, mode)  # an existing file keeps its permissions
    os.replace(tmp, target)
    _fsync_folder(target.parent if str(target.parent) else Path("."))


def discard(handle: IO, tmp: Path) -> None:
    """Close and delete a temporary file of open_temp that is not to be committed (a flush
    that fails on close, as on a full disk, changes nothing: the file goes)."""
    try:
        handle.close()
    except OSError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def replacing(path: str, *, inputs: Iterable[str] = (), where: str | None = None, binary: bool = False,
              newline: str | None = None) -> Iterator[IO]:
    """Write `path` atomically: yields a handle on a temporary file in the same folder, which
    replaces `path` when the block ends without an exception (and is deleted when it raises).
    Refuses what check_output refuses; an OSError is BadInput ("cannot write")."""
    where = where or path
    check_output(path, inputs, where)
    try:
        handle, tmp = open_temp(path, binary=binary, newline=newline)
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror or exc}", where) from None
    try:
        with handle:
            yield handle
            commit(handle, tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BadInput(f"cannot write: {exc.strerror or exc}", where) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_output(path: str, data: str | bytes, *, inputs: Iterable[str] = (), where: str | None = None) -> None:
    """Write `data` to `path`: atomically (temporary file, fsync, rename) for a regular file;
    straight through for a character device or FIFO. See check_output for what is refused."""
    where = where or path
    inputs = list(inputs)
    check_output(path, inputs, where)
    binary = isinstance(data, bytes)
    if _stream_target(path):
        try:
            with open(path, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
                handle.write(data)
        except OSError as exc:
            raise BadInput(f"cannot write: {exc.strerror or exc}", where) from None
        return
    with replacing(path, inputs=inputs, where=where, binary=binary) as handle:
        handle.write(data)


def _open_lock(lock_path: str, path: str) -> int:
    """Open (creating it if need be) the lock file itself: never a symbolic link there
    (O_NOFOLLOW: a link would let the lock create or touch the file it points to), and only
    a regular file."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(lock_path, flags, 0o666)
    except OSError as exc:
        if os.path.islink(lock_path):
            raise BadInput(f"the lock file {lock_path} is a symbolic link (to {os.readlink(lock_path)}); "
                           "planner does not follow links: remove it", path) from None
        raise BadInput(f"cannot create the lock file {lock_path}: {exc.strerror}", path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"the lock file {lock_path} is not a regular file: remove it", path)
    return fd


@contextmanager
def exclusive_lock(path: str, holder: str = "another process") -> Iterator[None]:
    """Hold an exclusive lock on `<path>.lock` for the block, or raise BadInput at once when
    someone else holds it. The lock file is removed on the way out; the kernel drops the lock
    of a killed process, so a leftover file never blocks anyone."""
    if fcntl is None:
        yield
        return
    lock_path = f"{path}.lock"
    while True:
        fd = _open_lock(lock_path, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise BadInput(f"{holder} is writing this file (it holds {lock_path}); wait for it to end", path) \
                from None
        try:  # the file we locked may have been removed (and recreated) by its last holder: retry
            if os.fstat(fd).st_ino == os.stat(lock_path).st_ino:
                break
        except FileNotFoundError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(lock_path)
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


__all__ = ["check_output", "commit", "discard", "exclusive_lock", "input_paths", "open_temp", "replacing",
           "write_output"]
