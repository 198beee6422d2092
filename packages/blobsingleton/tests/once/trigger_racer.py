"""Child process: one consumer of a Service Bus queue whose broker redelivers every message
to every consumer (a lost peek-lock, over and over). Each message is built by azure-functions'
converter (`blobsingleton.testing.service_bus_message`, the shapes of
azure-functions-python-library tests/test_servicebus.py); its work runs under
`@once("charge-{MessageId}")`. Logs each execution and each call's result."""

from __future__ import annotations

import json
import sys

import azure.functions as func
from blobsingleton import Busy, once
from blobsingleton.testing import service_bus_message


def main() -> None:
    executions, results, count, delivery = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
    )

    @once("charge-{MessageId}", busy=Busy.wait(timeout=120))
    def charge(msg: func.ServiceBusMessage) -> str:
        order = json.loads(msg.get_body())["order_id"]
        with open(executions, "a") as f:
            f.write(f"{msg.message_id} {msg.delivery_count}\n")
        return f"receipt-{order}"

    for i in range(count):
        message = service_bus_message(
            {"order_id": f"o{i:03d}"}, message_id=f"m{i:03d}", delivery_count=delivery
        )
        with open(results, "a") as f:
            f.write(f"{message.message_id} {charge(message)}\n")


if __name__ == "__main__":
    main()
