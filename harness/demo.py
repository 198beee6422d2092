"""`python -m harness demo`: the storm, guarded and unguarded, in well under a minute.

N instances each receive every event (one queue per instance, every event on every queue).
First the app as it is: `@once` per event id, so each event is emailed once. Then the same
storm through the same function without `@once`: every instance emails every event. On a
terminal a first line says what is about to run, a progress panel follows each run; the
instances' log goes to a file; the summary says what happened and where to look next, with
commands that run as printed (this interpreter's path, not a bare `python`, which is not
this virtualenv's unless it is activated). Piped (CI) or with `--json`: the summary or one
JSON object only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from harness import kit, progress, services
from harness.scenarios import imports, notifications

UNGUARDED_APP = "harness.apps.unguarded_app"
DEFAULT_INSTANCES = 4
DEFAULT_EVENTS = 200
#: The nightly import part: file accounts (a CSV and an 834 each) and one account whose
#: members are in a SQLite table, every instance firing the timer.
IMPORT_FILE_ACCOUNTS = 2
IMPORT_DATABASE_ACCOUNTS = 1
IMPORT_ROWS = 200
IMPORT_INSTANCES = 2
#: Seconds from the part's start to the timer's occurrence: its instances must be up by then
#: (a loaded machine takes several seconds to start them).
IMPORT_FIRE_AFTER_S = 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=DEFAULT_INSTANCES, metavar="N")
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument(
        "--verbose", action="store_true", help="stream the instances' log instead of a panel"
    )


def runnable(program: str | Path) -> str:
    """`program` as a command that runs from the working directory without an activated
    virtualenv or npx: relative inside it (`.venv/bin/python`), absolute elsewhere."""
    path = os.path.abspath(program)  # (a venv's link, not the interpreter it names)
    relative = os.path.relpath(path)
    return shlex.quote(path if relative.startswith("..") else relative)


def main(args: argparse.Namespace) -> int:
    if progress.on_terminal() and not args.json:
        print(
            f"Demo: a private Azurite, then {args.instances} instances x {args.events} events"
            " twice: with @once (each event emailed once), then without (every instance emails"
            " every event). A panel follows each run; the summary says where to look next.",
            flush=True,
        )
    run_dir = Path(".devhost") / kit.new_run_id()
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = None if args.verbose else str((run_dir / "instances.log").resolve())
    deliveries = args.instances * args.events
    (run_dir / "azurite").mkdir()
    with services.azurite(data_dir=str((run_dir / "azurite").resolve())) as azurite:
        os.environ["AzureWebJobsStorage"] = azurite.connection_string
        runs = {}
        for name, app, label in (
            ("guarded", "function_app", "with @once"),
            ("unguarded", UNGUARDED_APP, "no guard"),
        ):
            with progress.live(f"{label}: {deliveries} deliveries", deliveries) as attach:
                runs[name] = notifications.run(
                    args.instances, args.events, app_module=app, app_dir=args.app_dir,
                    keep=True, log_level=args.log_level, log_file=log_file,
                    watch=attach,
                )  # fmt: skip
        if progress.on_terminal() and not args.json:
            print(f"Nightly imports: {IMPORT_INSTANCES} instances fire the timer; "
                  f"{IMPORT_FILE_ACCOUNTS} file accounts and {IMPORT_DATABASE_ACCOUNTS} "
                  "SQLite account, each imported once...", flush=True)  # fmt: skip
        nightly = imports.run(
            IMPORT_INSTANCES, IMPORT_FILE_ACCOUNTS, IMPORT_ROWS, app_dir=args.app_dir,
            fire_after=IMPORT_FIRE_AFTER_S, timeout=180.0, keep=True, log_level=args.log_level,
            database_accounts=IMPORT_DATABASE_ACCOUNTS, database_folder=run_dir,
            log_file=log_file,
        )  # fmt: skip
    guarded, unguarded = runs["guarded"], runs["unguarded"]
    ok = guarded.ok and unguarded.drained and nightly.ok
    if args.json:
        print(json.dumps({"ok": ok, "guarded": asdict(guarded), "unguarded": asdict(unguarded),
                          "imports": nightly.to_dict(), "log": log_file,
                          "azurite_data": str(run_dir / "azurite")}))  # fmt: skip
    else:
        print(summary(args.instances, args.events, guarded, unguarded, log_file, run_dir))
        print(imports_summary(nightly))
    return 0 if ok else 1


def imports_summary(report: imports.ImportsReport) -> str:
    """The nightly import part: each account, its source, how often it ran, what it stored."""
    rows = [f"Nightly imports: {report.instances} instances fired the timer "
            f"{report.timer_firings} times; one run per account:"]  # fmt: skip
    for name, account in sorted(report.per_account.items()):
        source = ("a SQLite table" if account.source == "database"
                  else "a CSV and an 834")  # fmt: skip
        rows.append(f"  {name:8} from {source:17} {account.runs} run, {account.imported:>4} "
                    f"imported, {account.rejected} rejected (bad birth dates), "
                    f"{account.emails} summary email")  # fmt: skip
    rows.append(
        "OK: each account imported exactly once, the SQLite one beside the files"
        if report.ok
        else "FAILED: an account ran twice, or not at all (see the log)"
    )
    return "\n".join(rows)


def summary(
    instances: int,
    events: int,
    guarded: notifications.NotificationsReport,
    unguarded: notifications.NotificationsReport,
    log_file: str | None,
    run_dir: Path,
) -> str:
    rows = [
        f"Demo: {instances} instances, each receiving every one of {events} events "
        f"({instances * events} deliveries)",
        f"  {'':16}{'emails':>8}{'duplicates':>12}{'missing':>9}{'deferrals':>11}{'time':>9}",
    ]
    for name, run in (("with @once", guarded), ("no guard", unguarded)):
        rows.append(
            f"  {name:16}{run.emails_sent:>8}{run.duplicates:>12}{run.missing:>9}"
            f"{run.deferrals:>11}{run.elapsed_s:>8.1f}s"
        )
    verdict = (
        f"OK: each event emailed exactly once with @once; without it, {unguarded.duplicates} "
        "duplicate emails."
        if guarded.ok
        else "FAILED: the guarded run sent duplicates or missed events (see the log)."
    )
    python = runnable(sys.executable)
    rows += [
        verdict,
        f"Instances' log: {log_file or 'streamed above (--verbose)'}",
        "Look next:",
        f"  - the outbox: container outbox-{guarded.run_id} holds one email per event; to browse "
        f"it: {runnable(services.NODE_BIN / 'azurite')} --skipApiVersionCheck --location "
        f"{shlex.quote(str(run_dir / 'azurite'))}",
        f"  - the storm with no guard: {python} -m harness scenario notifications --app "
        f"{UNGUARDED_APP} --azurite",
        "  - why it holds, and where it cannot: docs/guarantees.md",
        f"  - the 8 x 1,000 benchmark: {python} -m harness scenario notifications --azurite",
    ]
    return "\n".join(rows)
