"""What a hostile sender puts on a queue or in a request, shared by the hostile-input tests."""

from __future__ import annotations

import json
from typing import Any

# The largest body a queue can carry: 64 KiB of base64 text, the host's default encoding.
MAX_QUEUE_BODY = 48 * 1024

# Bodies that no queue function of this app can run, whatever it expects.
DEEP_LIST = b"[" * 10_000 + b"]" * 10_000
DEEP_OBJECT = b'{"":' * 8_000 + b"1" + b"}" * 8_000
GENERIC_BODIES: dict[str, bytes] = {
    "empty": b"",
    "not JSON": b"hello",
    "invalid UTF-8": b'{"a": "\xff\xfe"}',
    "UTF-16": '{"a": 1}'.encode("utf-16"),
    "nested 10,000 lists deep": DEEP_LIST,
    "nested 10,000 objects deep": DEEP_OBJECT,
    "a JSON array": b"[1, 2, 3]",
    "a JSON string": b'"x"',
    "JSON null": b"null",
    "NaN": b"NaN",
    "as long as a queue allows": b'{"pad": "' + b"x" * (MAX_QUEUE_BODY - 11) + b'"}',
    "deep below the parser's limit": b'{"a":' * 900 + b"1" + b"}" * 900,
    "duplicate keys": b'{"a": 1, "a": 2}',
}

# Values substituted for each field of a valid body in turn.
HOSTILE_VALUES: dict[str, Any] = {
    "lone surrogate": "\ud800",
    "surrogate pair halves reversed": "\udc00\ud800",
    "traversal": "../../etc/passwd",
    "absolute path": "/etc/passwd",
    "NUL": "a\x00b",
    "newline": "a\nb",
    "overlong string": "x" * 40_000,
    "empty string": "",
    "number": 12,
    "huge number": 10**400,
    "infinity": float("inf"),
    "null": None,
    "list": ["a"],
    "object": {"a": 1},
    "bool": True,
    "deep list": json.loads("[" * 500 + "]" * 500),
}
