"""`python -m harness`: load scenarios, the demo and the chaos run, on devhost instances.

python -m harness scenario notifications --instances 8 --events 1000 [--json]
python -m harness demo             (the storm with and without @once, on a private Azurite)
python -m harness chaos --instances 8 --minutes 3 [--seed N] [--json]
                                   (all flows under seeded faults; exit 0 if every invariant held)
python -m harness chaos --server-errors 503=0.03,500=0.03 [--only-server-errors]
                                   (storage answering as Azure does under load, on every service)

The host itself (`python -m devhost run`) is devhost's; this is the tooling that drives it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from devhost.supervisor import host_arguments, run_command
from harness import chaos_run, demo, kit, scenarios

log = logging.getLogger("harness")


def _interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so instances and Azurite started here are stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def cmd_scenario(args: argparse.Namespace) -> int:
    _interrupt_on_sigterm()
    return int(args.scenario_main(args))


def cmd_chaos(args: argparse.Namespace) -> int:
    _interrupt_on_sigterm()
    return chaos_run.main(args)


def cmd_demo(args: argparse.Namespace) -> int:
    if not args.verbose:  # the progress panel and the summary own the terminal; the log file
        logging.getLogger().setLevel(logging.ERROR)  # has the rest
    return demo.main(args)


def build_parser() -> argparse.ArgumentParser:
    common = host_arguments("default: WARNING for chaos (problems only), else INFO")

    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    scenario = commands.add_parser("scenario", help="run a load scenario")
    kinds = scenario.add_subparsers(dest="scenario", required=True)
    for name, module in sorted(scenarios.available().items()):
        sub = kinds.add_parser(name, parents=[common], help=getattr(module, "HELP", None))
        module.add_arguments(sub)
        kit.add_run_arguments(sub)
        sub.set_defaults(handler=cmd_scenario, scenario_main=module.main)

    demo_parser = commands.add_parser(
        "demo", parents=[common], help="the storm guarded and unguarded, on a private Azurite"
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(handler=cmd_demo)

    chaos = commands.add_parser(
        "chaos", parents=[common], help="every flow under seeded faults; checks the invariants"
    )
    chaos_run.add_arguments(chaos)
    chaos.set_defaults(handler=cmd_chaos)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, "WARNING" if args.command == "chaos" else "INFO")


if __name__ == "__main__":
    sys.exit(main())
