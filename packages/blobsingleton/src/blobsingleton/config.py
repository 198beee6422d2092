"""Where the library's blobs live and whose they are: accounts, clients, namespace, keys.

`from_settings` reads a connection the way the Functions host does; its clients retry as
`RETRY` says unless their options name a policy; `set_client_options` and
`set_default_credential` apply to everything built from settings; `host_id` and `namespace`
name whose locks and records these are, `scope_of(fn)` a function's own scope in it (pass it
as `scope=` to `BlobRecordStore`, `read_lock` or the ops calls); `validate_key`, `encode_key`
and `blob_name` turn keys from user data into safe blob names."""

from blobsingleton._connection import (
    RETRY,
    StorageAccount,
    from_settings,
    set_client_options,
    set_default_credential,
)
from blobsingleton._keys import blob_name, encode_key, host_id, namespace, validate_key
from blobsingleton._keys import function_scope as scope_of

__all__ = [
    "RETRY", "StorageAccount", "blob_name", "encode_key", "from_settings", "host_id",
    "namespace", "scope_of", "set_client_options", "set_default_credential", "validate_key",
]  # fmt: skip
