"""moto's S3 server, and a proxy in front of it that fails ``DeleteObjects`` requests the way S3 does.

Each ``DeleteObjects`` request takes the next fault from a script (then ``ok``):

- ``drop``: the connection closes before any answer; nothing reached the store;
- ``timeout``: the store deletes the keys, the answer comes after the client gave up;
- ``slowdown``: 503 ``SlowDown``; nothing reached the store;
- ``partial``: the store deletes all but the first three keys, which the answer lists as
  ``InternalError``, as S3 does for keys it could not delete.

Each conditional ``PutObject`` (``If-None-Match``, how commits go into a Delta log) takes the
next fault from ``put_script`` (then ``ok``):

- ``conflict``: 409 ``ConditionalRequestConflict``, as S3 answers while another conditional
  write to the key is under way; nothing reached the store;
- ``lost``: the store takes the object, the connection closes before the answer reaches the
  client (which tries again, and is then told the key exists).

With ``drop_if_none_match`` the proxy is an S3-compatible store that ignores the condition: it
relays every conditional put without its ``If-None-Match`` header, so a second put of a key replaces
the first. With ``refuse_delete_conditions`` it is a store that knows no conditional deletes: a
``DeleteObjects`` whose keys carry an ``<ETag>`` is answered 501 ``NotImplemented`` whole.

Past its script, a ``DeleteObjects`` is ``throttled`` as S3 throttles a prefix, where
``prefix_keys_per_second`` is set: each folder of the bucket takes that many keys a second (a
request asks its keys' time of their folders, up to ``burst_seconds`` ahead); a request asking
more of a folder than that is answered 503 ``SlowDown`` and nothing reaches the store.

A test can hold every ``DeleteObjects`` at a barrier (``gate``) until as many are under way as it
names: proof that they are, not a guess from timings.

Every request is logged (time, fault, keys asked), so tests can count attempts per fault
and check the pace the store saw; conditional puts are logged in ``puts`` (fault, key). The
proxy can also hold every request a fixed time before relaying it: the benchmarks' stand-in
for S3's latency (benchmarks.delta_vacuum ``--s3``). With ``answer_deletes`` it answers each
``DeleteObjects`` it lets through itself (every key deleted), without the store: the
benchmarks' S3, whose floor is its per-prefix rate, not moto's own speed.
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PARTIAL_KEYS = 3
_OBJECT = re.compile(rb"<Object>.*?</Object>", re.S)
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)
_DELETED = (b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">%s</DeleteResult>')
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
_CONFLICT = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code>'
             b"<Message>A conflicting conditional operation is currently in progress against this resource."
             b"</Message></Error>")


_NOT_IMPLEMENTED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code>'
                    b"<Message>A header or element you provided implies functionality that is not implemented."
                    b"</Message></Error>")


SERVERS: set[int] = set()  # the process ids of the moto servers running (tests.durations reads their CPU time)


@contextmanager
def moto_server(authenticated_after: int | None = None, module: str = "tests.aws_s3",
                env: dict[str, str] | None = None) -> Iterator[str]:
    """A real HTTP S3 endpoint (moto's server) on the loopback interface, in a process of its own; its URL.
    ``authenticated_after``: from that many requests on, every request must be signed by an access key
    moto's IAM holds (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``); default: any credentials pass.
    ``module``: the server to run, with ``env`` added: by default moto's with AWS's conditional deletes
    (tests.aws_s3); ``moto.server`` is moto's own, which ignores them; ``tests.iam_s3`` also decides by IAM.

    Not a thread of this process: deltalake's calls into Rust hold the GIL, so a server thread
    beside them cannot answer and every S3 request of theirs times out."""
    with tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log") as log:
        # Port 0: the server binds a free port itself, and says which on its log (no window in which
        # another process could take a port we chose).
        env = dict(os.environ, **(env or {}), **({} if authenticated_after is None else
                                               {"INITIAL_NO_AUTH_ACTION_COUNT": str(authenticated_after)}))
        server = subprocess.Popen([sys.executable, "-m", module, "-H", "127.0.0.1", "-p", "0"],
                                  stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=Path(__file__).resolve().parents[1])
        try:
            for _ in range(300):
                bound = re.search(r"Running on (http://127\.0\.0\.1:\d+)", Path(log.name).read_text(errors="replace"))
                if bound:
                    endpoint = bound.group(1)
                    break
                if server.poll() is not None:
                    raise RuntimeError(f"moto's server exited with status {server.returncode}")
                time.sleep(0.1)
            else:
                raise RuntimeError("moto's server did not start within 30 s")
            SERVERS.add(server.pid)
            yield endpoint
        finally:
            SERVERS.discard(server.pid)
            server.terminate()
            server.wait(timeout=30)


def s3_client(endpoint: str) -> Any:
    """A boto3 client of the tests' own on ``endpoint``: one attempt per call, so that a fault a test sets
    up is met, not retried away."""
    from lakeio.store import s3

    return s3.client(endpoint, retries={"total_max_attempts": 1}, connect_timeout=10)


def point_s3a_at(spark, endpoint: str) -> None:
    """Spark's S3 connector at ``endpoint``, for the session (:func:`s3a_settings` in its Hadoop settings)."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_settings(endpoint).items():
        conf.set(key, value)


def s3a_settings(endpoint: str) -> dict[str, str]:
    """The Hadoop settings that point Spark's S3 connector at ``endpoint`` (``s3://`` mapped to it too)."""
    return {"fs.s3a.endpoint": endpoint, "fs.s3a.path.style.access": "true", "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.endpoint.region": "us-east-1", "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}


class FaultyS3:
    def __init__(self, upstream: str, hang_seconds: float = 2.0, delay_seconds: float = 0.0,
                 prefix_keys_per_second: float | None = None, burst_seconds: float = 0.1, answer_deletes: bool = False,
                 drop_if_none_match: bool = False, refuse_delete_conditions: bool = False):
        self.upstream = urlsplit(upstream)
        self.hang_seconds = hang_seconds
        self.delay_seconds = delay_seconds  # every request waits this long before it is relayed
        self.prefix_keys_per_second = prefix_keys_per_second
        self.burst_seconds = burst_seconds
        self.answer_deletes = answer_deletes
        self.drop_if_none_match = drop_if_none_match
        self.refuse_delete_conditions = refuse_delete_conditions
        self._folders_free_at: dict[bytes, float] = {}  # (bucket/folder) -> when its keys so far have had their time
        self.gate: threading.Barrier | None = None  # when set, each DeleteObjects waits there for the others
        # when set, each DeleteObjects (into hold_bucket, where given) waits until it is, after setting ``arrived``
        self.hold: threading.Event | None = None
        self.hold_bucket: str | None = None
        self.arrived = threading.Event()
        self.script: list[str] = []
        self.put_script: list[str] = []
        self.puts: list[tuple[str, str]] = []  # (fault, path) of each conditional put
        self.requests: list[tuple[float, str, int]] = []  # (monotonic time, fault, keys asked)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def counts(self) -> dict[str, int]:
        tally: dict[str, int] = {}
        for _, fault, _ in self.requests:
            tally[fault] = tally.get(fault, 0) + 1
        return tally

    def _next_fault(self, bucket: bytes, keys: list[bytes]) -> str:
        with self._lock:
            now = time.monotonic()
            fault = self.script.pop(0) if self.script else "ok"
            if fault == "ok" and self.prefix_keys_per_second is not None:
                asked: dict[bytes, int] = {}
                for key in keys:
                    folder = bucket + b"/" + key.rpartition(b"/")[0]
                    asked[folder] = asked.get(folder, 0) + 1
                free_at = {f: max(now, self._folders_free_at.get(f, 0.0)) for f in asked}
                if any(at - now > self.burst_seconds for at in free_at.values()):
                    fault = "throttled"
                else:
                    for folder, n in asked.items():
                        self._folders_free_at[folder] = free_at[folder] + n / self.prefix_keys_per_second
            self.requests.append((now, fault, len(keys)))
            return fault

    def _forward(self, method: str, path: str, headers: dict, body: bytes) -> tuple[int, list, bytes]:
        connection = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=30)
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        answer = (response.status, response.getheaders(), response.read())
        connection.close()
        return answer

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _relay(self):
                time.sleep(proxy.delay_seconds)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                if self.command == "POST" and urlsplit(self.path).query.startswith("delete"):
                    return self._delete_objects(headers, body)
                if self.command == "PUT" and "if-none-match" in {k.lower() for k in headers}:
                    if proxy.drop_if_none_match:  # moto checks no signature here: the store sees a plain put
                        headers = {k: v for k, v in headers.items() if k.lower() != "if-none-match"}
                        return self._answer(*proxy._forward(self.command, self.path, headers, body))
                    return self._conditional_put(headers, body)
                self._answer(*proxy._forward(self.command, self.path, headers, body))

            def _conditional_put(self, headers: dict, body: bytes):
                with proxy._lock:
                    fault = proxy.put_script.pop(0) if proxy.put_script else "ok"
                    proxy.puts.append((fault, urlsplit(self.path).path))
                if fault == "conflict":
                    return self._answer(409, [("Content-Type", "application/xml")], _CONFLICT)
                answer = proxy._forward("PUT", self.path, headers, body)
                if fault == "lost":
                    self.close_connection = True
                    return
                self._answer(*answer)

            def _delete_objects(self, headers: dict, body: bytes):
                if proxy.gate is not None:
                    proxy.gate.wait()  # BrokenBarrierError (the request fails) unless its fellows come in time
                if proxy.hold is not None and proxy.hold_bucket in (None, urlsplit(self.path).path.strip("/")):
                    proxy.arrived.set()
                    proxy.hold.wait()
                if proxy.refuse_delete_conditions and b"<ETag>" in body:
                    return self._answer(501, [("Content-Type", "application/xml")], _NOT_IMPLEMENTED)
                keys = [m.group(1) for o in _OBJECT.findall(body) if (m := _KEY.search(o))]
                fault = proxy._next_fault(urlsplit(self.path).path.strip("/").encode(), keys)
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault in ("slowdown", "throttled"):
                    return self._answer(503, [("Content-Type", "application/xml")], _SLOWDOWN)
                if fault == "ok" and proxy.answer_deletes:
                    deleted = b"".join(b"<Deleted><Key>%s</Key></Deleted>" % k for k in keys)
                    return self._answer(200, [("Content-Type", "application/xml")], _DELETED % deleted)
                failed = []
                if fault == "partial":
                    objects = _OBJECT.findall(body)
                    failed = [m.group(1) for o in objects[:PARTIAL_KEYS] if (m := _KEY.search(o))]
                    body = _OBJECT.sub(lambda m: b"" if m.group(0) in objects[:PARTIAL_KEYS] else m.group(0), body)
                    headers = {k: v for k, v in headers.items()
                               if not k.lower().startswith(("content-md5", "x-amz-checksum", "x-amz-sdk-checksum"))}
                status, answer_headers, answer = proxy._forward("POST", self.path, headers, body)
                if fault == "timeout":
                    time.sleep(proxy.hang_seconds)
                    self.close_connection = True
                    return
                if failed:
                    errors = b"".join(b"<Error><Key>%s</Key><Code>InternalError</Code>"
                                      b"<Message>We encountered an internal error.</Message></Error>" % k
                                      for k in failed)
                    answer = answer.replace(b"</DeleteResult>", errors + b"</DeleteResult>")
                self._answer(status, answer_headers, answer)

            def _answer(self, status: int, headers: list, body: bytes):
                self.send_response(status)
                length = str(len(body))
                for name, value in headers:
                    if name.lower() == "content-length" and self.command == "HEAD":
                        length = value  # the object's size, which a HEAD answer states without a body
                    elif name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", length)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        return Handler
