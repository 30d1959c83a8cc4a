"""The write side of a remote ``--out`` (``s3://``, ``gs://``, ``az://``, ...): files go to the store as they are made.

A run with a remote output works in a local folder (``location.work_folder``: its database, scan state and token
cache stay there).  Each shard's mix file and rejected lines are streamed to the store as soon as that shard's mix
is written (fsspec's ``open(url, "wb")``: a multipart upload on S3, in the pool's own format and codec, the bytes
the local write made) and the local copies are removed, so the run's disk holds about one mix file per worker.
Each shard's table rows follow as Parquet parts when its mix is recorded (store/table_parts.py); the whole tables
and the report when the publish step makes them; ``run.json`` goes last, as the commit marker: until it is replaced, the store's ``run.json`` is the previous run's.  Objects under ``mix/``,
``rejected/`` and ``tables/`` that the committed run does not have are deleted just before ``run.json``.

A failing upload (after the retries with back-off that ``location.retrying`` gives transient errors) raises
:class:`UploadError`, whose message is one line naming the object and the store's error.  The database file is
never uploaded: it stays on the run's host.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from contam_assets.store.location import Location, _first_line, redact, remote_files, retrying

CHUNK = 8 << 20  # bytes handed to the store's writer at a time (s3fs sends a part every block_size)
PART_BYTES = 16 << 20  # the multipart part size asked of the store's writer (s3fs: at least 5 MiB)
COMMIT = "run.json"
OWNED = ("mix", "rejected", "tables")  # folders whose stray objects a commit deletes


class UploadError(RuntimeError):
    """An output that could not be written to the store; the message is one line naming the object."""


def _store_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(exc) or 'no message'}"


def upload(loc: Location, local: Path, rel: str, remove: bool = False) -> int:
    """Stream the file ``local`` to ``rel`` under the remote output ``loc``; its size.  With ``remove`` the local
    copy is deleted once the store has it.  UploadError (one line) when the store refuses it after the retries."""
    url = loc.url(rel)
    fs = loc.filesystem()
    local = Path(local)

    def put() -> None:
        kw = {"block_size": PART_BYTES} if loc.protocol == "s3" else {}
        with open(local, "rb") as src, fs.open(url, "wb", **kw) as dst:
            shutil.copyfileobj(src, dst, CHUNK)

    try:
        retrying(put)
    except Exception as exc:  # noqa: BLE001 - the store's error, in one line
        raise UploadError(f"upload of {redact(url)} failed: {_store_error(exc)}") from None
    size = local.stat().st_size
    if remove:
        local.unlink(missing_ok=True)
    return size


def read_text(loc: Location, rel: str) -> str | None:
    """A small object of the output (a shard's rejected lines) as text; None when the store does not have it."""
    try:
        with retrying(loc.filesystem().open, loc.url(rel), "rb") as fh:
            return fh.read().decode("utf-8")
    except FileNotFoundError:
        return None


def sizes(loc: Location, folder: str) -> dict[str, int]:
    """The objects under ``folder`` of the output: path relative to the output -> size ({} when there are none)."""
    sub = Location(loc.protocol, f"{loc.root.rstrip('/')}/{folder}", "", loc.spec, loc.scheme)
    try:
        return {f"{folder}/{rel}": int(v.get("size") or 0) for rel, v in remote_files(sub).items()}
    except FileNotFoundError:
        return {}


def commit(loc: Location, folder: Path, keep: set[str], files: list[str], log=print,
           keep_under: tuple[str, ...] = ()) -> int:
    """The end of a run with a remote output: ``files`` (paths relative to ``folder``: tables, report) uploaded, the
    objects under mix/, rejected/ and tables/ that are not in ``keep`` (nor among ``files``, nor under a folder of
    ``keep_under``, whose owner deletes what it no longer needs) deleted, then ``run.json`` uploaded last.  The
    number of objects uploaded; UploadError (one line) on the first failure, with the store's ``run.json`` left as
    it was."""
    folder = Path(folder)
    for rel in files:
        upload(loc, folder / rel, rel)
    fs = loc.filesystem()
    stale = []
    for name in OWNED:
        stale += sorted(r for r in sizes(loc, name)
                        if r not in keep and r not in files and not r.startswith(keep_under))
    for rel in stale:
        try:
            retrying(fs.rm_file, loc.url(rel))
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise UploadError(f"delete of {redact(loc.url(rel))} failed: {_store_error(exc)}") from None
    upload(loc, folder / COMMIT, COMMIT)
    log(f"out {loc.display}: {len(files) + 1} file(s) uploaded at the end, run.json last"
        + (f"; {len(stale)} stale object(s) removed" if stale else ""))
    return len(files) + 1


def local_files(folder: Path, names: tuple[str, ...]) -> list[str]:
    """The files under ``folder``'s ``names`` (files or folders), relative to it, hidden ones left out."""
    folder, found = Path(folder), []
    for name in names:
        p = folder / name
        if p.is_file():
            found.append(name)
        elif p.is_dir():
            found += [f.relative_to(folder).as_posix() for f in sorted(p.rglob("*"))
                      if f.is_file() and not any(part.startswith(".") for part in f.relative_to(folder).parts)]
    return found

