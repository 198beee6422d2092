from __future__ import annotations

import pytest
from blobsingleton._keys import encode_key
from blobsingleton.config import blob_name, validate_key
from blobsingleton.errors import InvalidKey


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("x" * 257, "257 characters"),
        ("a\nb", "control"),
        ("a\x00b", "control"),
        ("../x", "escapes"),
        ("a/../../b", "escapes"),
        ("/etc/passwd", "escapes"),
        ("..", "escapes"),
        ("a\\..\\b", "escapes"),
        (42, "string"),
    ],
)
def test_bad_keys_are_refused_with_the_reason(key: object, reason: str) -> None:
    with pytest.raises(InvalidKey, match=reason):
        validate_key(key)


def test_invalid_key_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_key("")


def test_encoding_keeps_keys_inside_their_prefix_and_distinct() -> None:
    names = {blob_name("locks", k) for k in ["import-A", "import/A", "import A", "import%2FA", "é"]}
    assert len(names) == 5
    for name in names:
        prefix, rest = name.split("/", 1)
        assert prefix == "locks"
        assert "/" not in rest
        assert not rest.endswith(".")


def test_safe_characters_are_kept_readable() -> None:
    assert encode_key("import-Acme_1") == "import-Acme_1"
    assert encode_key("a.b") == "a%2Eb"
    assert encode_key("é") == "%C3%A9"
