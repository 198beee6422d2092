"""`python -m devhost`: run the app at scale locally, as `func start` runs it, in N instances.

python -m devhost run --instances 3 [--timers every|once] [--http-port 7071]
                      [--app function_app] [--functions NAME...]
                      [--instance-setting NAME=VALUE]... [--setting NAME=VALUE]...

Load scenarios, the demo and the chaos run are `python -m harness` (harness/).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from devhost.app_settings import parse_assignment
from devhost.supervisor import (
    ADMIN_KEY_SETTING,
    FUNCTION_KEY_SETTING,
    HostOptions,
    Supervisor,
    host_arguments,
    run_command,
)
from devhost.timer_listener import TIMER_MODES

log = logging.getLogger("devhost")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _assignments(values: list[str] | None) -> dict[str, str]:
    result: dict[str, str] = {}
    for value in values or []:
        try:
            name, setting = parse_assignment(value)
        except ValueError as error:
            raise SystemExit(f"devhost: {error}") from error
        result[name] = setting
    return result


def _wait_for_signal(supervisor: Supervisor) -> int:
    """Block until SIGINT/SIGTERM (0) or until every instance has exited (1)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    alive = set(supervisor.alive())
    while not stop.wait(1.0):
        now_alive = set(supervisor.alive())
        for instance in sorted(alive - now_alive):
            code = supervisor.exit_codes()[instance]
            log.error("instance %d exited unexpectedly with code %s", instance, code)
        alive = now_alive
        if not alive:
            log.error("every instance has exited")
            return 1
    log.info("stopping: waiting for in-flight invocations")
    return 0


def cmd_run(args: argparse.Namespace) -> int:

    options = HostOptions(
        instances=args.instances,
        app_module=args.app,
        app_dir=args.app_dir,
        timers=args.timers,
        http_port=args.http_port,
        functions=args.functions,
        settings=dict(_assignments(args.setting)),
        instance_settings=_assignments(args.instance_setting),
        drain_timeout=args.drain_timeout,
        log_level=args.log_level,
        restart=True,  # the host starts a new worker process when one dies, and logs it
    )
    supervisor = Supervisor(options)
    supervisor.start()
    for i, info in sorted(supervisor.started_instances().items()):
        functions = ", ".join(info.get("functions", {})) or "no functions"
        port = f"HTTP on port {args.http_port + i}" if args.http_port is not None else "no HTTP"
        print(f"instance {i}: {functions}; {port}", flush=True)
    if args.http_port is not None and supervisor.generated_key:
        print(f"function key (local, generated; set {FUNCTION_KEY_SETTING} to choose one): "
              f"{supervisor.function_key}", flush=True)  # fmt: skip
    if args.http_port is not None and supervisor.generated_admin_key:
        print(f"admin key (local, generated; set {ADMIN_KEY_SETTING} to choose one): "
              f"{supervisor.admin_key}", flush=True)  # fmt: skip
    print(f"running; log level {args.log_level} (--log-level INFO shows each invocation); "
          "Ctrl-C to stop", flush=True)  # fmt: skip
    code = 1
    try:
        code = _wait_for_signal(supervisor)
    finally:
        supervisor.stop()
        totals = supervisor.totals()
        log.info(
            "invocations %s, failures %s, poisoned %d, storage requests host %d app %d",
            totals.invocations,
            totals.failures,
            totals.poisoned,
            totals.host_storage_requests,
            totals.app_storage_requests,
        )
    return code


def build_parser() -> argparse.ArgumentParser:
    common = host_arguments("default: WARNING (problems only)")

    parser = argparse.ArgumentParser(
        prog="python -m devhost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", parents=[common], help="run the app in N instances")
    run.add_argument("--instances", type=_positive, default=1)
    run.add_argument(
        "--functions",
        nargs="+",
        metavar="NAME",
        help="run only these functions (like func start --functions)",
    )
    run.add_argument(
        "--timers",
        choices=TIMER_MODES,
        default="every",
        help="every: each instance fires each timer; once: only the listener "
        "lease holder does, like the real host",
    )
    run.add_argument(
        "--http-port",
        type=int,
        default=7071,
        help="instance i serves HTTP triggers on this port + i",
    )
    run.add_argument(
        "--instance-setting",
        action="append",
        metavar="NAME=VALUE",
        help="per-instance app setting; {instance} becomes the instance number",
    )
    run.add_argument(
        "--setting",
        action="append",
        metavar="NAME=VALUE",
        help="app setting for every instance (wins over env and local settings)",
    )
    run.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds a stopping instance waits for in-flight invocations",
    )
    run.set_defaults(handler=cmd_run)

    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv), "WARNING")


if __name__ == "__main__":
    sys.exit(main())
