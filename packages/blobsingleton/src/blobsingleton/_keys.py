"""Keys from user data (account ids, event ids) made safe blob names (docs/internals.md)."""

from __future__ import annotations

import unicodedata

from blobsingleton.errors import InvalidKey

MAX_KEY_LENGTH = 256
#: Azure's limit on a blob name (characters, after percent-encoding here).
MAX_BLOB_NAME = 1024
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def validate_key(key: object, *, max_length: int = MAX_KEY_LENGTH) -> str:
    """`key` in Unicode normal form C, if it is usable as a lease or record key (so "é" typed
    as one code point or as "e" and a combining accent is one key); `InvalidKey` otherwise."""
    if not isinstance(key, str):
        raise InvalidKey(key, f"must be a string, not {type(key).__name__}")
    key = unicodedata.normalize("NFC", key)
    if not key.strip():
        raise InvalidKey(key, "must not be empty")
    if len(key) > max_length:
        raise InvalidKey(key, f"is {len(key)} characters long, the limit is {max_length}")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in key):
        raise InvalidKey(key, "contains control characters or lone surrogates")
    segments = key.replace("\\", "/").split("/")
    if key.startswith(("/", "\\")) or any(s in (".", "..") for s in segments):
        raise InvalidKey(key, "contains a path segment ('/', '.' or '..') that escapes its prefix")
    return key


def encode_key(key: str) -> str:
    """Percent-encode every character outside [A-Za-z0-9_-] (UTF-8 bytes, upper-case hex)."""
    return "".join(
        ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in key
    )


def blob_name(prefix: str, key: str) -> str:
    """The blob name for `key` under `prefix`, after validating the key; `InvalidKey` when it
    would pass Azure's 1,024-character limit (many non-ASCII characters encode long)."""
    encoded = encode_key(validate_key(key))
    name = f"{prefix}/{encoded}" if prefix else encoded
    if len(name) > MAX_BLOB_NAME:
        raise InvalidKey(
            key,
            f"names a blob of {len(name)} characters once encoded; Azure allows {MAX_BLOB_NAME}",
        )
    return name


def prefix(namespace: str, scope: str | None) -> str:
    """Where a namespace's keys are named: `{namespace}` for the app's, `{namespace}/@{scope}`
    for one function's own ('@' is never in an encoded key, so the two cannot meet)."""
    return namespace if scope is None else f"{namespace}/@{scope}"
