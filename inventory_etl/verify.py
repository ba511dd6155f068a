"""Checking that every data file a manifest lists is there, whole and unchanged.

With MD5 sums, Spark tasks check presence, size and MD5, one task per data file, in one
job for all deliveries of the run: each task streams its file through pyarrow's
filesystems (local, ``s3://``/``s3a://`` with the usual AWS credential chain and the
cluster's ``fs.s3a.endpoint``, ``gs://``, ``hdfs://``) in fixed-size chunks, so memory
stays bounded and files of any size (AWS writes several hundred MB, sometimes over
2 GiB) work. Sizes alone come from the cluster's Hadoop connector on the driver, which
also serves clusters whose S3 access exists only there.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING
from urllib.parse import quote

from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

from inventory_etl.manifest import DeliveryError, Manifest
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line

_Measured = tuple[str, int | None, str | None, str | None]  # uri, length, MD5 hex, problem
_MISSING = "data file listed in the manifest is missing"
_CHUNK_BYTES = 8 << 20  # what one task holds of a data file at a time


def verify_data_files(spark: SparkSession, manifests: list[Manifest], check_md5: bool = True) -> dict[str, DeliveryError]:
    """The first problem found per manifest URI; manifests absent from the result are fine."""
    wanted = sorted({f.uri for m in manifests for f in m.files})
    if not wanted:
        return {}
    if check_md5:
        endpoint = _s3_endpoint(spark)
        tasks = spark.sparkContext.parallelize(wanted, len(wanted)).map(lambda uri: _measure_md5(uri, endpoint))
        found = tasks.collect()
    else:
        storage = Storage(spark)
        found = [_measure_size(storage, uri) for uri in wanted]
    measured = {uri: (length, md5, error) for uri, length, md5, error in found}
    problems: dict[str, DeliveryError] = {}
    for manifest in manifests:
        for data_file in manifest.files:
            length, md5, error = measured[data_file.uri]
            if error is not None:
                problem = error
            elif length != data_file.size:
                problem = f"size {length} does not match the manifest's {data_file.size}"
            elif check_md5 and md5 != data_file.md5:
                problem = f"MD5 {md5} does not match the manifest's {data_file.md5}"
            else:
                continue
            problems[manifest.uri] = DeliveryError(data_file.uri, problem)
            break
    return problems


def _measure_size(storage: Storage, uri: str) -> _Measured:
    try:
        status = storage.status(uri)
    except Exception as exc:  # noqa: BLE001 - py4j: no filesystem for the scheme, no access, ...
        return uri, None, None, f"cannot read the data file: {first_line(exc)}"
    if status is None:
        return uri, None, None, _MISSING
    return uri, status.size, None, None


def _s3_endpoint(spark: SparkSession) -> str | None:
    """The S3-compatible endpoint the cluster set for S3A (MinIO, a VPC endpoint, ...), if any."""
    endpoint: str | None = spark.sparkContext._jsc.hadoopConfiguration().get("fs.s3a.endpoint")
    return endpoint


def _open(uri: str, s3_endpoint: str | None) -> tuple[FileSystem, str]:
    from pyarrow import fs

    scheme = uris.scheme_of(uri)
    if scheme in ("s3", "s3a", "s3n") and s3_endpoint:
        return fs.S3FileSystem(endpoint_override=s3_endpoint), uri.split("://", 1)[1]
    plain = "s3" + uri[len(scheme):] if scheme in ("s3a", "s3n") else uri
    filesystem, path = fs.FileSystem.from_uri(quote(plain, safe=":/"))  # Arrow parses a URI: escape [ ] { } and spaces
    return filesystem, str(path)


def _measure_md5(uri: str, s3_endpoint: str | None) -> _Measured:
    """(uri, length, MD5 hex, problem): runs in a Spark task, reading the file once, as a stream."""
    try:
        filesystem, path = _open(uri, s3_endpoint)
        digest, length = hashlib.md5(), 0
        with filesystem.open_input_stream(path, compression=None) as stream:
            while chunk := stream.read(_CHUNK_BYTES):
                digest.update(chunk)
                length += len(chunk)
        return uri, length, digest.hexdigest(), None
    except Exception as exc:  # noqa: BLE001 - reported per file, never fatal to the run
        return uri, None, None, _problem(exc)


def _problem(exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return _MISSING
    return f"cannot read the data file: {first_line(exc)}"
