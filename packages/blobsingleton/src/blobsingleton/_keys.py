"""Turn keys that come from user data (account ids, event ids) into safe blob names.

Keys are validated first, so a hostile key fails loudly instead of landing somewhere odd;
then every character outside [A-Za-z0-9_-] is percent-encoded, so a key can never add a
`/`, end in `.`, or collide with another key's blob.
"""

from __future__ import annotations

import unicodedata

from blobsingleton.errors import InvalidKey

MAX_KEY_LENGTH = 256
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def validate_key(key: object, *, max_length: int = MAX_KEY_LENGTH) -> str:
    """Return `key` if it is usable as a lease or record key; raise `InvalidKey` otherwise."""
    if not isinstance(key, str):
        raise InvalidKey(key, f"must be a string, not {type(key).__name__}")
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
    """The blob name for `key` under `prefix`, after validating the key."""
    return f"{prefix}/{encode_key(validate_key(key))}" if prefix else encode_key(validate_key(key))
