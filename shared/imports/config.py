"""The import's app settings, read and checked in one place.

    IMPORT_CHUNK_RECORDS           records per checkpoint (5000)
    IMPORT_INVOCATION_BUDGET_S     seconds one invocation imports (240, at most 270)
    IMPORT_WRITE_LANES             member transactions in flight per account (4, 1..16)
    IMPORT_MAX_FILE_BYTES          a bigger incoming file is rejected whole, unread (1 GiB)
    IMPORT_MAX_FAMILY_DEPENDENTS   dependents an 834 family may have (200): beyond it every
                                   member of the family is rejected, each as it is read
    IMPORT_MAX_LOOP_SEGMENTS       segments one 834 member loop (INS to the next INS), or one
                                   transaction set's header, may have (2000)
    IMPORT_MAX_REJECTS             rejected records one file may have (10,000): the next one
                                   stops the file (`importer._stop_file`)
    IMPORT_MAX_REJECT_BYTES        bytes of one file's rejected records (16 MiB, 1 KiB to
                                   4 GiB): a reject that would pass it stops the file
    IMPORT_DEPENDENT_ID_KEY        optional: a secret (16 to 64 characters) that keys the hash
                                   of a dependent's identity (`dependents.py`); unset: unkeyed

`check()` runs when the function app is indexed (functions/imports.py): a value that is not
a number, or out of its range, fails the start-up with the setting's name, instead of
failing (or being silently replaced) at run time. The importer reads them again for each
run (`ImportSettings.from_env()`), so a test or an operator changing one needs no restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import InvalidSetting, number_setting, setting, whole_setting

DEFAULT_CHUNK_RECORDS = 5000
DEFAULT_BUDGET_S = 240.0
#: At most this much of an invocation goes to importing: each must end well inside 5 min.
MAX_BUDGET_S = 270.0
DEFAULT_LANES = 4
MAX_LANES = 16
DEFAULT_MAX_FILE_BYTES = 1024**3
DEFAULT_MAX_FAMILY_DEPENDENTS = 200
DEFAULT_MAX_LOOP_SEGMENTS = 2000
DEFAULT_MAX_REJECTS = 10_000
DEFAULT_MAX_REJECT_BYTES = 16 * 1024**2
#: The reject byte cap's range: at 4 GiB the rejected file is about 4,096 blocks of 1 MiB.
REJECT_BYTES_RANGE = (1024, 4 * 1024**3)
#: The dependent id key's length in bytes (BLAKE2b accepts keys up to 64 bytes).
ID_KEY_BYTES = (16, 64)


def _id_key() -> bytes:
    raw = setting("IMPORT_DEPENDENT_ID_KEY")
    if not raw:
        return b""
    key = raw.encode("utf-8")
    low, high = ID_KEY_BYTES
    if not low <= len(key) <= high:
        raise InvalidSetting(
            f"app setting IMPORT_DEPENDENT_ID_KEY must be {low} to {high} bytes long, "
            f"not {len(key)}"
        )
    return key


@dataclass(frozen=True, repr=False)
class ImportSettings:
    chunk_records: int = DEFAULT_CHUNK_RECORDS
    budget_s: float = DEFAULT_BUDGET_S
    lanes: int = DEFAULT_LANES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_family_dependents: int = DEFAULT_MAX_FAMILY_DEPENDENTS
    max_loop_segments: int = DEFAULT_MAX_LOOP_SEGMENTS
    max_rejects: int = DEFAULT_MAX_REJECTS
    max_reject_bytes: int = DEFAULT_MAX_REJECT_BYTES
    dependent_id_key: bytes = b""

    @classmethod
    def from_env(cls) -> ImportSettings:
        """The settings as they are now; `InvalidSetting` names the first bad one."""
        return cls(
            chunk_records=whole_setting("IMPORT_CHUNK_RECORDS", DEFAULT_CHUNK_RECORDS, 1),
            budget_s=number_setting(
                "IMPORT_INVOCATION_BUDGET_S", DEFAULT_BUDGET_S, 0, MAX_BUDGET_S
            ),
            lanes=whole_setting("IMPORT_WRITE_LANES", DEFAULT_LANES, 1, MAX_LANES),
            max_file_bytes=whole_setting("IMPORT_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES, 1024),
            max_family_dependents=whole_setting(
                "IMPORT_MAX_FAMILY_DEPENDENTS", DEFAULT_MAX_FAMILY_DEPENDENTS, 1
            ),
            max_loop_segments=whole_setting(
                "IMPORT_MAX_LOOP_SEGMENTS", DEFAULT_MAX_LOOP_SEGMENTS, 10
            ),
            max_rejects=whole_setting("IMPORT_MAX_REJECTS", DEFAULT_MAX_REJECTS, 1),
            max_reject_bytes=whole_setting(
                "IMPORT_MAX_REJECT_BYTES", DEFAULT_MAX_REJECT_BYTES, *REJECT_BYTES_RANGE
            ),
            dependent_id_key=_id_key(),
        )

    def __repr__(self) -> str:  # never the key
        return (
            f"ImportSettings(chunk_records={self.chunk_records}, budget_s={self.budget_s:g}, "
            f"lanes={self.lanes}, max_file_bytes={self.max_file_bytes}, "
            f"max_family_dependents={self.max_family_dependents}, "
            f"max_loop_segments={self.max_loop_segments}, "
            f"max_rejects={self.max_rejects}, max_reject_bytes={self.max_reject_bytes}, "
            f"dependent_id_key={'set' if self.dependent_id_key else 'unset'})"
        )


def check() -> ImportSettings:
    """The start-up check: the settings, or `InvalidSetting` (the function app fails to
    start, naming the setting)."""
    return ImportSettings.from_env()
