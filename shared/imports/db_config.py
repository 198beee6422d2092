"""An account's relational source: its settings, read and checked in one place.

    IMPORT_DATABASE_ACCOUNTS            comma-separated accounts that have a database source
    IMPORT_DATABASE_{A}_URL             SQLAlchemy URL (a Key Vault reference in Azure);
                                        with AUTH=entra it carries no password
    IMPORT_DATABASE_{A}_TABLE           the table or view, `schema.table` or `table`
    IMPORT_DATABASE_{A}_KEY             the column that orders and identifies its rows (unique,
                                        not null): the keyset's key
    IMPORT_DATABASE_{A}_COLUMNS         member field=column pairs, comma-separated: every
                                        member field but coverage_end is required
    IMPORT_DATABASE_{A}_AUTH            `password` (default: what the URL says) or `entra`
                                        (a Microsoft Entra token per connection, `db_engine.py`)
    IMPORT_DATABASE_{A}_PAGE_ROWS       rows per page and per checkpoint (5000, 10 to 100,000)
    IMPORT_DATABASE_{A}_TIMEOUT_S       connect and statement timeout (60, 1 to 600)

`{A}` is the account in upper case with `-` as `_` (app setting names hold letters, digits
and `_`): account `acme-east` reads IMPORT_DATABASE_ACME_EAST_URL. Two accounts that map to
one name are refused.

`check()` runs when the function app is indexed (functions/imports.py), and
`database_source(account)` again at each run's start: an unparsable URL, a missing table, key
or mapping, an unknown member field, a driver that is not installed, each fails naming its
setting and before anything is written. The URL's password never appears in a message: a
`DatabaseSource` shows its URL as SQLAlchemy renders it with the password hidden (`***`).
Whether the mapped columns exist is checked against the reflected table when the run
connects (`db_reader.check_columns`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.layout import InvalidFileName, check_file_name
from shared.imports.records import FIELDS
from shared.settings import InvalidSetting, setting

#: Kind of source, beside "csv" and "x12-834" (reports, telemetry, history rows).
DATABASE = "database"
DEFAULT_PAGE_ROWS = 5000
PAGE_ROWS_RANGE = (10, 100_000)
DEFAULT_TIMEOUT_S = 60
TIMEOUT_RANGE = (1, 600)
AUTHS = ("password", "entra")
#: Fields a mapping must name (coverage_end may be left out: open coverage).
REQUIRED_FIELDS = tuple(f for f in FIELDS if f != "coverage_end")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$ ]{0,62}")


def setting_prefix(account: str) -> str:
    """`IMPORT_DATABASE_{A}_` for `account` (see the module docstring)."""
    return f"IMPORT_DATABASE_{account.upper().replace('-', '_')}_"


@dataclass(frozen=True, repr=False)
class DatabaseSource:
    """One account's database source, as its settings state it."""

    account: str
    url: URL
    table: str
    schema: str | None
    key: str
    columns: tuple[tuple[str, str], ...]  # (member field, column), in FIELDS order
    auth: str = "password"
    page_rows: int = DEFAULT_PAGE_ROWS
    timeout_s: int = DEFAULT_TIMEOUT_S

    @property
    def name(self) -> str:
        """The source's name in reports, rejects and history rows: `database:{table}`."""
        return f"{DATABASE}:{self.schema + '.' if self.schema else ''}{self.table}"

    @property
    def safe_url(self) -> str:
        """The URL with its password hidden, the only way it is ever shown."""
        return self.url.render_as_string(hide_password=True)

    @property
    def fingerprint(self) -> str:
        """What a checkpoint is for: the source (URL, password aside) and its reading.
        Settings changed during a run make its next invocation read from the top."""
        text = "\n".join([self.safe_url, self.name, self.key, repr(self.columns), self.auth])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def setting_name(self, suffix: str) -> str:
        return setting_prefix(self.account) + suffix

    def __repr__(self) -> str:  # never the password
        return (f"DatabaseSource({self.account!r}, {self.safe_url!r}, {self.name!r}, "
                f"key={self.key!r}, auth={self.auth!r}, page_rows={self.page_rows})")  # fmt: skip


def database_accounts() -> list[str]:
    """IMPORT_DATABASE_ACCOUNTS; `InvalidSetting` naming it for an invalid account name or two
    accounts sharing one setting prefix."""
    raw = setting("IMPORT_DATABASE_ACCOUNTS") or ""
    accounts: dict[str, str] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            account = validate_account(part)
        except InvalidAccount as error:
            raise InvalidSetting(f"app setting IMPORT_DATABASE_ACCOUNTS: {error}") from None
        prefix = setting_prefix(account)
        if accounts.get(prefix, account) != account:
            raise InvalidSetting(
                f"app setting IMPORT_DATABASE_ACCOUNTS: accounts {accounts[prefix]!r} and "
                f"{account!r} would both read {prefix}* settings"
            )
        accounts[prefix] = account
    return sorted(accounts.values())


def database_source(account: str) -> DatabaseSource | None:
    """The account's source, None when it has none; `InvalidSetting` naming the bad setting."""
    if account not in database_accounts():
        return None
    prefix = setting_prefix(account)

    def required(suffix: str) -> str:
        value = setting(prefix + suffix)
        if not value or not value.strip():
            raise InvalidSetting(f"app setting {prefix}{suffix} is not set (account {account} "
                                 "is in IMPORT_DATABASE_ACCOUNTS)")  # fmt: skip
        return value.strip()

    url = _url(prefix + "URL", required("URL"))
    schema, table = _table(prefix + "TABLE", required("TABLE"))
    key = _identifier(prefix + "KEY", required("KEY"))
    columns = _columns(prefix + "COLUMNS", required("COLUMNS"))
    auth = (setting(prefix + "AUTH") or "password").strip().lower()
    if auth not in AUTHS:
        raise InvalidSetting(f"app setting {prefix}AUTH must be one of {', '.join(AUTHS)}")
    if auth == "entra" and url.password:
        raise InvalidSetting(f"app setting {prefix}URL holds a password, and {prefix}AUTH is "
                             "entra: leave the password out of the URL")  # fmt: skip
    source = DatabaseSource(
        account, url, table, schema, key, columns, auth,
        _whole(prefix + "PAGE_ROWS", DEFAULT_PAGE_ROWS, PAGE_ROWS_RANGE),
        _whole(prefix + "TIMEOUT_S", DEFAULT_TIMEOUT_S, TIMEOUT_RANGE),
    )  # fmt: skip
    try:
        check_file_name(source.name)
    except InvalidFileName as error:
        raise InvalidSetting(f"app setting {prefix}TABLE: {error}") from None
    return source


def check() -> list[DatabaseSource]:
    """The start-up check: every configured account's source, or `InvalidSetting`."""
    return [s for s in map(database_source, database_accounts()) if s is not None]


def _url(name: str, raw: str) -> URL:
    try:
        url = make_url(raw)
        url.get_dialect()  # the driver named must be installed
    except (ArgumentError, ValueError):
        # SQLAlchemy's message quotes the string it could not parse: the password with it
        raise InvalidSetting(
            f"app setting {name} is not a SQLAlchemy URL (dialect+driver://user@host:port/database)"
        ) from None
    except NoSuchModuleError:
        raise InvalidSetting(f"app setting {name}: no SQLAlchemy dialect or driver "
                             f"{url.drivername!r} is installed") from None  # fmt: skip
    return url


def _identifier(name: str, raw: str) -> str:
    """A table, schema or column name from settings: plain identifiers only (SQLAlchemy
    quotes them in SQL; nothing of a row ever reaches SQL text)."""
    if not _IDENTIFIER.fullmatch(raw):
        raise InvalidSetting(f"app setting {name}: {raw!r} is not a plain identifier "
                             "(letters, digits, _, $ and spaces, at most 63)")  # fmt: skip
    return raw


def _table(name: str, raw: str) -> tuple[str | None, str]:
    schema, _, table = raw.rpartition(".")
    return (_identifier(name, schema) if schema else None), _identifier(name, table)


def _columns(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    mapping: dict[str, str] = {}
    for pair in (p.strip() for p in raw.split(",")):
        if not pair:
            continue
        field, sep, column = (part.strip() for part in pair.partition("="))
        if not sep or not column:
            raise InvalidSetting(f"app setting {name}: {pair!r} is not field=column")
        if field not in FIELDS:
            raise InvalidSetting(f"app setting {name}: {field!r} is not a member field "
                                 f"({', '.join(FIELDS)})")  # fmt: skip
        if field in mapping:
            raise InvalidSetting(f"app setting {name}: member field {field!r} mapped twice")
        mapping[field] = _identifier(name, column)
    missing = [f for f in REQUIRED_FIELDS if f not in mapping]
    if missing:
        raise InvalidSetting(f"app setting {name}: no column for member field(s) "
                             f"{', '.join(missing)}")  # fmt: skip
    return tuple((f, mapping[f]) for f in FIELDS if f in mapping)


def _whole(name: str, default: int, bounds: tuple[int, int]) -> int:
    raw = setting(name)
    if raw is None:
        return default
    low, high = bounds
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidSetting(f"app setting {name} must be a whole number") from None
    if not low <= value <= high:
        raise InvalidSetting(f"app setting {name} must be {low} to {high}, not {value}")
    return value
