"""moto's S3 server with the conditional deletes AWS's ``DeleteObjects`` honours and moto's ignores.

AWS evaluates an ``<ETag>`` in an ``<Object>`` of a ``DeleteObjects`` against the key's current
version: ``*`` asks that the key exist, any other value that its ETag be that one. A key with no
current version (none, or a delete marker on top) is answered as an ``<Error>`` with ``NoSuchKey``, an
ETag that does not match with ``PreconditionFailed``; neither is deleted. moto's server deletes every
key asked, condition or not (it honours ``If-Match`` on a single ``DeleteObject`` only). This server
follows AWS, so that the tests meet the store a user's run meets; ``python -m moto.server`` itself
stays the store that ignores the condition (the README's, on which a run says its deletes cannot tell).

Run as ``python -m tests.aws_s3 -H 127.0.0.1 -p 0`` (moto's server's own arguments); tests.s3_faults'
``moto_server`` does that.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape as _xml


def deleting_only(response: Any, bucket_name: str, authenticated: bool, delete_keys: Any, request: dict,
                  refused: list[tuple[dict, str, str]]) -> Any:
    """moto's own ``DeleteObjects`` (``delete_keys``) of the entries of ``request`` that are not ``refused``
    (entry, code, message), with an ``<Error>`` for each refused one added to its answer: how a patched
    server decides some keys itself and leaves the rest to moto."""
    import re

    import xmltodict

    objects = request["Delete"].get("Object", [])
    objects = objects if isinstance(objects, list) else [objects]
    allowed = [e for e in objects if all(e is not r for r, _, _ in refused)]
    if allowed:
        request["Delete"]["Object"] = allowed
        response.body = xmltodict.unparse(request)
        status, headers, body = delete_keys(response, bucket_name, authenticated)
    else:
        status, headers = 200, {"Content-Type": "application/xml"}
        body = '<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>'
    errors = "".join(f"<Error><Key>{_xml(e['Key'])}</Key>"
                     + (f"<VersionId>{_xml(e['VersionId'])}</VersionId>" if e.get("VersionId") else "")
                     + f"<Code>{code}</Code><Message>{_xml(message)}</Message></Error>" for e, code, message in refused)
    text = body.decode() if isinstance(body, bytes) else body
    return status, headers, re.sub(r"(</DeleteResult>)\s*$", lambda m: errors + m.group(1), text)


def patch() -> None:
    """Make moto's ``DeleteObjects`` decide each conditional entry as AWS does (see the module's docstring)."""
    import xmltodict
    from moto.s3.responses import S3Response

    delete_keys = S3Response._bucket_response_delete_keys

    def conditional(self: Any, bucket_name: str, authenticated: bool = True) -> Any:
        request = xmltodict.parse(self.body, strip_whitespace=False)
        objects = request["Delete"].get("Object", [])
        objects = objects if isinstance(objects, list) else [objects]
        refused = []
        for entry in objects:
            wanted = entry.get("ETag")
            if wanted is None or entry.get("VersionId"):
                continue
            current = self.backend.get_object(bucket_name, entry["Key"])  # None: no key, or a delete marker on top
            if current is None:
                refused.append((entry, "NoSuchKey", "The specified key does not exist."))
            elif wanted != "*" and wanted.strip('"') != current.etag.strip('"'):
                refused.append((entry, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"))
        return deleting_only(self, bucket_name, authenticated, delete_keys, request, refused)

    S3Response._bucket_response_delete_keys = conditional  # type: ignore[method-assign]


if __name__ == "__main__":
    from moto.server import main

    patch()
    main()
