"""Driver-side metadata access to any store the cluster can reach, via Hadoop FileSystem.

Going through Spark's own Hadoop configuration means every scheme the cluster is set
up for (``s3a://``, EMRFS ``s3://``, ``abfss://``, ``gs://``, local ``file:``) works
without a second set of credentials. Only small things are read here (manifests,
folder listings); bulk data is read by Spark tasks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakeio.errors import HousekeepingError
from lakeio.spark.session import HIDDEN_FOLDER_LOGGER, JvmObject, jvm_of, quiet_logs
from lakeio.store import uris


class MoveFailed(HousekeepingError, OSError):
    """The store did not rename a file (to the trash, or back from it)."""


@dataclass(frozen=True)
class FileStatus:
    uri: str
    size: int
    modification_time: int  # epoch milliseconds
    is_dir: bool


# Named outside Storage, whose own ``list`` method hides the builtin there.
Listing = list[FileStatus]
FileUris = list[str]


class Storage:
    """Hadoop FileSystem calls through the driver's JVM gateway."""

    def __init__(self, spark: SparkSession):
        self._spark = spark
        self._jvm = jvm_of(spark)
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, uri: str) -> JvmObject:
        return self._jvm.org.apache.hadoop.fs.Path(uris.to_uri(uri))

    def _fs(self, path: JvmObject) -> JvmObject:
        return path.getFileSystem(self._conf)

    @staticmethod
    def _status(st: JvmObject) -> FileStatus:
        return FileStatus(
            uri=uris.to_uri(st.getPath().toString()),
            size=int(st.getLen()),
            modification_time=int(st.getModificationTime()),
            is_dir=bool(st.isDirectory()),
        )

    def check_scheme(self, scheme: str) -> None:
        """Raise (the JVM's error) unless Hadoop on this Spark has a file system for ``scheme``."""
        self._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, self._conf)

    def exists(self, uri: str) -> bool:
        path = self._path(uri)
        return bool(self._fs(path).exists(path))

    def status(self, uri: str) -> FileStatus | None:
        """One file's status; None when it does not exist."""
        path = self._path(uri)
        fs = self._fs(path)
        return self._status(fs.getFileStatus(path)) if fs.exists(path) else None

    def list(self, uri: str) -> Listing:
        """Direct children of a folder (empty when it does not exist)."""
        path = self._path(uri)
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        return [self._status(st) for st in fs.listStatus(path)]

    def files_in(self, folders: Sequence[str]) -> dict[str, FileUris]:
        """The URIs of the files directly in each folder (keyed as given), from one listing by
        Spark's own file index: on executors past Spark's parallel-listing threshold, where
        :meth:`list` costs the driver a gateway round trip per file (500 ``_delta_log/``
        folders: about 3 s against 1 s). Like every Spark read, it leaves out names starting
        with ``_`` or ``.``. Raises when any folder cannot be listed (one that does not exist,
        say): the caller lists them one by one to learn which."""
        reader = self._spark.read.options(recursiveFileLookup="true", ignoreMissingFiles="false")
        with quiet_logs(self._spark, HIDDEN_FOLDER_LOGGER):
            listed = reader.format("text").load([uris.literal(f) for f in folders])._jdf.inputFiles()
        # One gateway call for the whole array (Spark ships Jackson), not two per file.
        spellings = json.loads(self._jvm.com.fasterxml.jackson.databind.ObjectMapper().writeValueAsString(listed))
        found: dict[str, FileUris] = {uris.canonical(f): [] for f in folders}
        for spelled in spellings:  # a URI's escaped spelling, and any depth: keep the direct children
            uri = uris.decode_log_path(spelled)
            folder = found.get(uris.canonical(uris.parent(uri)))
            if folder is not None:
                folder.append(uri)
        return {f: found[uris.canonical(f)] for f in folders}

    def walk(self, uri: str) -> Listing:
        """Every file below a folder, at any depth (empty when it does not exist)."""
        path = self._path(uri)
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        found, files = [], fs.listFiles(path, True)
        while files.hasNext():
            found.append(self._status(files.next()))
        return found

    def glob(self, pattern: str) -> Listing:
        """Hadoop glob (``*``, ``?``, ``{a,b}``); empty when nothing matches."""
        path = self._path(pattern)
        found = self._fs(path).globStatus(path)
        return [self._status(st) for st in (found or [])]

    def read_bytes(self, uri: str) -> bytes:
        path = self._path(uri)
        stream = self._fs(path).open(path)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Create or replace one file."""
        path = self._path(uri)
        stream = self._fs(path).create(path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def delete(self, uri: str, recursive: bool = False) -> bool:
        path = self._path(uri)
        return bool(self._fs(path).delete(path, recursive))

    def remove_if_empty(self, folder: str) -> bool:
        """Remove ``folder`` only while it holds nothing, decided by the file system in the delete itself (a
        non-recursive delete): a listing first and a recursive delete after would take with it whatever
        another process wrote there in between. False where it holds something, or is not there."""
        try:
            return self.delete(folder)
        except Exception:  # noqa: BLE001 - Hadoop's PathIsNotEmptyDirectoryException, or its IOException on a local disk
            return False

    def move(self, uri: str, to: str) -> bool:
        """Rename a file, creating ``to``'s folder; False when ``uri`` is gone. Never over a file at
        ``to`` (Hadoop's local file system would replace it; HDFS would refuse)."""
        source, target = self._path(uri), self._path(to)
        fs = self._fs(source)
        if not fs.exists(source):
            return False
        if fs.exists(target):
            raise MoveFailed(f"cannot move {uri} to {to}: a file is there")
        fs.mkdirs(target.getParent())
        if not fs.rename(source, target):
            raise MoveFailed(f"cannot move {uri} to {to} (does it exist already, or lie on another file system?)")
        return True
