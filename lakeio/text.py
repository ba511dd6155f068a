"""Text for people: one-line errors out of long Java traces, byte counts they can read."""

from __future__ import annotations

import re
import sys

# Spark's preamble before a failed task's own error: the error is what names the file.
_TASK_FAILURE = re.compile(r"^(?:(?:org\.apache\.spark\.)?SparkException: )?Job aborted due to stage failure: "
                           r".*?most recent failure: Lost task .*?\): ")
# What a reader does not need of a Java message: the package of a class named in it, Spark's error
# class ("[FAILED_READ_FILE.NO_HINT] ") and SQL state.
_PACKAGE = re.compile(r"\b(?:[a-z][\w$]*\.)+(?=[A-Z][\w$]*(?:Exception|Error)\b)")
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\] ")
_SQL_STATE = re.compile(r"\s*SQLSTATE: \w+\.?")
# A message longer than this is cut (at a space): no reason we give comes near it.
LONGEST = 2000


def first_line(exc: BaseException, limit: int = LONGEST) -> str:
    """One line saying what went wrong: the message's first real line, plus the root cause
    when a Java stack trace names one (py4j wraps everything in "An error occurred while calling"),
    whole: file names are never cut. A storage failure everyone meets (a scheme with no file
    system, access denied, no such bucket, expired credentials, a stale checksum file) leads
    with what to do about it (:func:`storage_advice`)."""
    lines = [_plain(ln.strip().lstrip(": ").strip()) for ln in str(exc).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("An error occurred while calling", "at "))]
    if not lines:
        return type(exc).__name__
    causes = [ln[len("Caused by: "):] for ln in lines if ln.startswith("Caused by: ")]
    if raised := _raised(str(exc)):  # a Python worker's error: its own line, not PySpark's words around it
        lines[0] = raised
    lines[0] = _TASK_FAILURE.sub("", lines[0])
    text = lines[0] if not causes or causes[-1] in lines[0] else f"{lines[0]} (cause: {causes[-1]})"
    advice = storage_advice(str(exc))
    if advice is None:
        return shorten_end(text, limit)
    return f"{advice} [{shorten_end(text, max(limit - len(advice) - 3, 60))}]"  # the advice is never cut


def _raised(text: str) -> str | None:
    """The exception line a Python traceback in ``text`` ends with (its last one's): the first line
    not indented after its last indented one (Python indents the frames and their code with spaces)."""
    lines = text.splitlines()
    start = max((i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln), default=None)
    if start is None:
        return None
    after = lines[start + 1:]
    frames_end = max((i for i, ln in enumerate(after) if ln.startswith(" ")), default=-1)  # a JVM's are "\tat"
    raised = [ln.strip() for ln in after[frames_end + 1:] if ln.strip()]
    return _plain(raised[0]) if raised else None


def _plain(line: str) -> str:
    return _SQL_STATE.sub("", _ERROR_CLASS.sub("", _PACKAGE.sub("", line)))


# Hadoop connectors by URI scheme: what makes a scheme readable.
_CONNECTORS = {
    "s3": "use s3a:// URIs with hadoop-aws on the classpath (spark-submit --packages "
          "org.apache.hadoop:hadoop-aws:<your Hadoop version>), or run on EMR, whose EMRFS serves s3://",
    "s3n": "use s3a:// URIs with hadoop-aws on the classpath",
    "s3a": "put hadoop-aws on the classpath (spark-submit --packages org.apache.hadoop:hadoop-aws:<your Hadoop version>)",
    "gs": "put the Cloud Storage connector (gcs-connector) on the classpath",
    "abfs": "put hadoop-azure on the classpath", "abfss": "put hadoop-azure on the classpath",
    "wasb": "put hadoop-azure on the classpath", "wasbs": "put hadoop-azure on the classpath",
}
_NO_FILE_SYSTEM = re.compile(r'No FileSystem for scheme:? "?([A-Za-z0-9+.-]+)"?')
_MISSING_CLASS = re.compile(r"Class (org\.apache\.hadoop\.fs\.(s3a|azurebfs|azure)\.\w+|"
                            r"com\.google\.cloud\.hadoop\.fs\.gcs\.\w+) not found")
_NOT_AUTHORIZED = re.compile(r"(arn:aws:[^\s]+) is not authorized to perform:? ([\w:*]+)(?: on resource:? \"?([^\s\"]+))?")
# deltalake (delta-rs) prints an error's chain one cause a line, each after a coloured arrow, cutting the
# store's own message at every ": " (AWS's "User: ... is not authorized to perform: ..." among them).
_CHAINED = re.compile(r"\s*\n\s*(?:\x1b\[[0-9;]*m)?↳(?:\x1b\[[0-9;]*m)?\s*")
_DENIED = re.compile(r"AccessDenied|Access Denied|Status Code: 403|403 Forbidden|\(403\)|AuthorizationPermissionMismatch")
_NO_BUCKET = re.compile(r"NoSuchBucket|The specified bucket does not exist|UnknownStoreException|"
                        r"Bucket (\S+) does not exist")
_STALE_CHECKSUM = re.compile(r"ChecksumException: Checksum error: (\S+)")
# What S3 or the socket said, before any guess at a permission or a credential: an unknown key, a
# secret that does not sign, an endpoint no one answers at.
_UNKNOWN_KEY = re.compile(r"InvalidAccessKeyId|Access Key Id you provided does not exist")
_BAD_SECRET = re.compile(r"SignatureDoesNotMatch|request signature we calculated does not match")
_UNREACHABLE = re.compile(r"Connection refused|connect timed out|Connect timeout|UnknownHostException|No such host|"
                          r"Name or service not known|Could not connect to the endpoint URL", re.IGNORECASE)
# Where the socket went: the Java SDK's "Connect to host:port", boto3's endpoint URL, deltalake's request.
_ADDRESS = re.compile(r"Connect to ([\w.\-]+:\d+)|endpoint URL: \"?\w+://([^/\"\s]+)|"
                      r"(?:GET|PUT|POST|HEAD|DELETE) \w+://([^/\s]+)|UnknownHostException: ([\w.\-]+)")
_EXPIRED = re.compile(r"ExpiredToken|token (?:included in the request )?(?:has|is) expired|RequestExpired|"
                      r"credentials? (?:have|has) expired", re.IGNORECASE)


def storage_advice(message: str) -> str | None:
    """What to do about a common storage failure named anywhere in ``message`` (a Java trace, a boto3
    error, deltalake's chain of causes); None when it is none of them."""
    message = _CHAINED.sub(": ", message)
    if match := _NO_FILE_SYSTEM.search(message):
        scheme = match.group(1).lower()
        return (f'no file system for "{scheme}://" on this Spark: '
                + _CONNECTORS.get(scheme, f"put the Hadoop connector for {scheme}:// on the classpath"))
    if match := _MISSING_CLASS.search(message):
        connector = {"s3a": "s3a", "azurebfs": "abfs", "azure": "wasb"}.get(match.group(2) or "", "gs")
        return f"the Hadoop connector is missing ({match.group(1)}): {_CONNECTORS[connector]}"
    if match := _STALE_CHECKSUM.search(message):
        name = match.group(1).rstrip("/").rsplit("/", 1)[-1]
        return (f"{name} no longer matches the Hadoop checksum file beside it (.{name}.crc): it changed after it "
                "was written; put the right content back, or delete the stale .crc if the content is right")
    if _UNKNOWN_KEY.search(message):
        return ("the store does not know this access key (InvalidAccessKeyId): the key id the job runs with "
                "(AWS_ACCESS_KEY_ID, AWS_PROFILE, fs.s3a.access.key) is mistyped, deleted, or of another account "
                "or endpoint")
    if _BAD_SECRET.search(message):
        return ("the secret key does not match the access key (SignatureDoesNotMatch): check AWS_SECRET_ACCESS_KEY "
                "or fs.s3a.secret.key (and this machine's clock)")
    if _UNREACHABLE.search(message):
        found = _ADDRESS.search(message)
        where = next((g for g in found.groups() if g), None) if found else None
        return (f"the endpoint {f'at {where} ' if where else ''}does not answer (connection refused, timed out, or "
                "no such host): check the endpoint URL (AWS_ENDPOINT_URL, fs.s3a.endpoint, --s3-endpoint-url), "
                "the network, and that the service is up")
    if _EXPIRED.search(message):
        return ("the AWS credentials have expired: renew them (aws sso login, a fresh session token, the "
                "instance profile) and run again")
    if match := _NOT_AUTHORIZED.search(message):
        on = f" on {match.group(3)}" if match.group(3) else ""
        return (f"access denied: {match.group(1)} may not {match.group(2)}{on}: grant it (the role's IAM policy, the "
                "bucket policy, or a KMS key's policy)")
    if _DENIED.search(message):
        return ("access denied: the credentials this job runs with (instance profile, AWS_PROFILE, fs.s3a.* "
                "settings) lack this request's permission: listing needs s3:ListBucket, reading s3:GetObject, "
                "deleting s3:DeleteObject (s3:DeleteObjectVersion to purge versions), SSE-KMS objects kms:Decrypt")
    if match := _NO_BUCKET.search(message):
        named = f" {match.group(1)}" if match.group(1) else ""
        return f"no such bucket{named}: check the bucket name and the account and region the job runs in"
    return None


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``; negative for shrinkage."""
    sign, size = ("-" if n < 0 else ""), float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{sign}{int(size)} B" if unit == "B" else f"{sign}{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def usd(amount: float) -> str:
    """Dollars to the cent; an amount that rounds to nothing but is not nothing says so (``<$0.01``)."""
    return "<$0.01" if 0 < amount < 0.005 else f"${amount:,.2f}"


def shorten_end(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters from the right (the start of a message says the most),
    at a space where there is one, so that no file name is left half."""
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters from the left (the end of a path says the most)."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour, by hand
    from enum import Enum

    class StrEnum(str, Enum):
        """Members are their value wherever text is expected (JSON, f-strings, Spark literals)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)
