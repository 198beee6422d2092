"""Queue trigger listener with the WebJobs queue semantics.

Polls with randomized exponential backoff up to maxPollingInterval, fetches a batch when the
in-flight count falls to newBatchThreshold, holds each message invisible for 10 minutes
(renewed) while the function runs, deletes it on success, makes it visible again after
visibilityTimeout on failure, and copies it to `{queue}-poison` once its dequeue count reaches
maxDequeueCount. Messages are received undecoded and base64-decoded here one by one, so a
message that is not base64 goes to the poison queue instead of failing its whole batch.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import blobsingleton
import blobsingleton.config
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import BinaryBase64EncodePolicy
from blobsingleton.testing import queue_message

from devhost.host_config import QueueOptions
from devhost.host_retry import HostRetry
from devhost.indexing import IndexedFunction, QueueTrigger
from devhost.invocation import invoke
from devhost.request_counting import RequestCounter
from devhost.stats import WorkerStats

log = logging.getLogger("devhost.queue")

#: The host keeps a message invisible this long while its function runs, renewing halfway.
#: A killed instance's messages reappear only after it: DEVHOST_INVOCATION_VISIBILITY (at
#: least 15 s, the renewal loop wakes every 5 s) shortens it for scenarios that kill instances.
INVOCATION_VISIBILITY = max(15, int(os.environ.get("DEVHOST_INVOCATION_VISIBILITY") or 600))
MIN_POLLING_INTERVAL = 0.1


class Backoff:
    """Randomized exponential backoff between `minimum` and `maximum` seconds."""

    def __init__(self, minimum: float, maximum: float) -> None:
        self.minimum = min(minimum, maximum)
        self.maximum = maximum
        self._current = self.minimum

    def reset(self) -> None:
        self._current = self.minimum

    def next(self) -> float:
        delay = self._current
        self._current = min(self.maximum, self._current * 2 * random.uniform(0.8, 1.2))
        return delay


def decode_body(text: str, encoding: str) -> bytes:
    """The message body as bytes; ValueError when base64 is expected and the text is not."""
    if encoding == "none":
        return text.encode("utf-8")
    compact = "".join(text.split())
    try:
        return base64.b64decode(compact, validate=True)
    except binascii.Error as error:
        raise ValueError(str(error)) from error


def bind_queue_message(message: Any, body: bytes) -> Any:
    """`func.QueueMessage` as the worker decodes it from the host's body and trigger metadata
    (the queue's fields; a JSON object body's top-level fields replace same-named ones, as the
    host's case-insensitive binding data does): the library's test kit builds it the one way
    both use. Raises (ValueError and the like) where the worker's decoding fails, before the
    function runs."""
    return queue_message(
        body,
        id=message.id,
        dequeue_count=int(message.dequeue_count or 0),
        pop_receipt=message.pop_receipt,
        inserted_at=message.inserted_on,
        expires_at=message.expires_on,
        next_visible_at=message.next_visible_on,
    )


class _Delivery:
    """One received message while it is being processed; its pop receipt changes on renewal."""

    def __init__(self, message: Any) -> None:
        self.message = message
        self.pop_receipt: str = message.pop_receipt
        self.renewed_at = time.monotonic()
        self.lock = threading.Lock()
        self.done = False
        #: Its pop receipt stopped matching at a renewal: not renewed again (as the host).
        self.renewal_lost = False


class QueueListener:
    """Runs one queue-triggered function from one queue until stopped."""

    def __init__(
        self,
        function: IndexedFunction,
        options: QueueOptions,
        host_counter: RequestCounter,
        stats: WorkerStats,
        *,
        queue: tuple[str, str, str] | None = None,
    ) -> None:
        """`queue`: (queue, poison queue, connection) for a host-internal queue whose
        messages `_invoke_message` turns into invocations (the blob trigger's); by default the
        function's own queue trigger, its `{queue}-poison` and its connection."""
        self.function = function
        self.options = options
        self.stats = stats
        if queue is None:
            assert isinstance(function.trigger, QueueTrigger)
            trigger = function.trigger
            name = trigger.resolved_queue_name()
            queue = (name, f"{name}-poison", trigger.connection)
        self.queue_name, self.poison_name, connection = queue
        service = (
            blobsingleton.config.from_settings(connection)
            .with_options(raw_request_hook=host_counter, retry_policy=HostRetry())
            .queue_service()
        )
        self._queue = service.get_queue_client(
            self.queue_name,
            message_encode_policy=None,  # raw text in and out: decoded per message below
            message_decode_policy=None,
        )
        self._poison = service.get_queue_client(
            self.poison_name,
            message_encode_policy=BinaryBase64EncodePolicy(),
            message_decode_policy=None,
        )
        self._poison_ready = False
        self._queue_ready = False
        self._stop = threading.Event()
        self._capacity = threading.Condition()
        self._in_flight: dict[str, _Delivery] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=options.max_concurrency, thread_name_prefix=f"q-{function.name}"
        )
        self._thread = threading.Thread(
            target=self._poll_loop, name=f"poll-{function.name}", daemon=True
        )
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"renew-{function.name}", daemon=True
        )

    # lifecycle

    def start(self) -> None:
        log.info(
            "%s: listening on queue %s (batchSize %d, newBatchThreshold %d, "
            "maxPollingInterval %.1fs, maxDequeueCount %d)",
            self.function.name,
            self.queue_name,
            self.options.batch_size,
            self.options.new_batch_threshold,
            self.options.max_polling_interval,
            self.options.max_dequeue_count,
        )
        # The queue exists before the instance reports ready, so a producer that enqueues on
        # "ready" finds it; storage not answering yet is left to the poll loop, which retries.
        try:
            self._ensure_queue()
            self._queue_ready = True
        except Exception:  # logged by the loop's own attempt
            self._queue_ready = False
        self._thread.start()
        self._renewer.start()

    def stop(self) -> None:
        """Stop fetching; in-flight invocations go on (see `drain`)."""
        self._stop.set()
        with self._capacity:
            self._capacity.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait for the poll loop and in-flight invocations; True when all finished in time."""
        deadline = time.monotonic() + timeout
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._capacity:
            done = self._capacity.wait_for(
                lambda: not self._in_flight, max(0.0, deadline - time.monotonic())
            )
        if not done:
            log.warning(
                "%s: %d invocation(s) still running at shutdown; their messages reappear "
                "after the visibility timeout",
                self.function.name,
                len(self._in_flight),
            )
        self._pool.shutdown(wait=False, cancel_futures=False)
        self._renewer.join(1.0)
        return done

    # polling

    def _ensure_queue(self) -> None:
        with contextlib.suppress(ResourceExistsError):
            self._queue.create_queue()

    def _wait_for_capacity(self) -> None:
        with self._capacity:
            self._capacity.wait_for(
                lambda: (
                    self._stop.is_set() or len(self._in_flight) <= self.options.new_batch_threshold
                )
            )

    def _receive(self) -> list[Any]:
        pages = self._queue.receive_messages(
            messages_per_page=self.options.batch_size,
            max_messages=self.options.batch_size,
            visibility_timeout=INVOCATION_VISIBILITY,
        ).by_page()
        return list(next(pages, []))

    def _poll_loop(self) -> None:
        backoff = Backoff(MIN_POLLING_INTERVAL, self.options.max_polling_interval)
        while not self._stop.is_set():
            try:
                if not self._queue_ready:
                    self._ensure_queue()
                    self._queue_ready = True
                self._wait_for_capacity()
                if self._stop.is_set():
                    break
                messages = self._receive()
            except ResourceNotFoundError:
                self._queue_ready = False
                log.warning(
                    "%s: queue %s is missing; recreating", self.function.name, self.queue_name
                )
                self._stop.wait(backoff.next())
                continue
            except Exception as error:
                log.error(
                    "%s: polling %s failed: %r; retrying",
                    self.function.name,
                    self.queue_name,
                    error,
                )
                self._stop.wait(backoff.next())
                continue
            if not messages:
                self._stop.wait(backoff.next())
                continue
            backoff.reset()
            for message in messages:
                delivery = _Delivery(message)
                with self._capacity:
                    self._in_flight[message.id] = delivery
                self._pool.submit(self._process, delivery)

    # one message

    def _process(self, delivery: _Delivery) -> None:
        message = delivery.message
        try:
            self._handle(delivery)
        except Exception:  # never let one message kill a pool thread or the loop
            log.exception(
                "%s: unexpected error handling message %s", self.function.name, message.id
            )
        finally:
            with self._capacity:
                delivery.done = True
                self._in_flight.pop(message.id, None)
                self._capacity.notify_all()

    def _handle(self, delivery: _Delivery) -> None:
        message = delivery.message
        name = self.function.name
        try:
            body = decode_body(message.content or "", self.options.message_encoding)
        except ValueError:
            log.error(
                "%s: message %s on %s is not valid base64 (messageEncoding=base64) and "
                "cannot be decoded: moving it to %s without invoking the function",
                name,
                message.id,
                self.queue_name,
                self.poison_name,
            )
            self._move_to_poison(delivery, (message.content or "").encode("utf-8"))
            return
        name = self._function_name(body)
        if message.dequeue_count > self.options.max_dequeue_count:
            log.error(
                "%s: message %s already dequeued %d times (> maxDequeueCount %d): moving it to "
                "%s without invoking the function",
                name,
                message.id,
                message.dequeue_count,
                self.options.max_dequeue_count,
                self.poison_name,
            )
            self._move_to_poison(delivery, body)
            return
        self.stats.started(name)
        ok = False
        try:
            self._invoke_message(message, body)
            ok = True
        except Exception:
            log.exception(
                "%s: invocation failed for message %s (dequeue count %d of %d)",
                name,
                message.id,
                message.dequeue_count,
                self.options.max_dequeue_count,
            )
        finally:
            self.stats.finished(name, ok)
        if ok:
            self._delete(delivery)
        elif message.dequeue_count >= self.options.max_dequeue_count:
            log.error(
                "%s: message %s failed %d times (maxDequeueCount %d): moving it to %s",
                name,
                message.id,
                message.dequeue_count,
                self.options.max_dequeue_count,
                self.poison_name,
            )
            self._move_to_poison(delivery, body)
        else:
            self._release(delivery)

    def _function_name(self, body: bytes) -> str:
        """The function a message is for (its stats and log lines name it)."""
        return self.function.name

    def _invoke_message(self, message: Any, body: bytes) -> None:
        """One attempt: the function invoked with the message (raises when it fails)."""
        # Decoded inside the invocation, as the worker does: a body that breaks the
        # metadata fails this attempt like any other failure (the host counts it).
        queue_message = bind_queue_message(message, body)
        invoke(
            self.function.user_function,
            {self.function.arg_name: queue_message},
            function_name=self.function.name,
        )

    def _delete(self, delivery: _Delivery) -> None:
        retried: list[Any] = []  # each attempt the SDK sent again: the answer it had
        with delivery.lock:
            try:
                self._queue.delete_message(
                    delivery.message.id,
                    delivery.pop_receipt,
                    retry_hook=lambda **attempt: retried.append(attempt.get("response")),
                )
            except HttpResponseError as error:
                if not taken_by_another_delivery(error):
                    raise
                if any(may_have_landed(answer) for answer in retried):
                    log.debug(  # as the host, which ignores MessageNotFound at delete
                        "%s: message %s deleted by an earlier attempt whose answer was lost",
                        self.function.name,
                        delivery.message.id,
                    )
                    return
                log.warning(
                    "%s: message %s was already gone at delete (its visibility expired and "
                    "another delivery took it)",
                    self.function.name,
                    delivery.message.id,
                )

    def _release(self, delivery: _Delivery) -> None:
        """Make a failed message visible again after visibilityTimeout (0 = now)."""
        with delivery.lock:
            try:
                self._queue.update_message(
                    delivery.message.id,
                    delivery.pop_receipt,
                    visibility_timeout=int(self.options.visibility_timeout),
                )
            except HttpResponseError as error:
                if not taken_by_another_delivery(error):
                    raise
                log.warning(
                    "%s: message %s was gone when releasing it",
                    self.function.name,
                    delivery.message.id,
                )

    def _move_to_poison(self, delivery: _Delivery, body: bytes) -> None:
        if not self._poison_ready:
            with contextlib.suppress(ResourceExistsError):
                self._poison.create_queue()
            self._poison_ready = True
        self._poison.send_message(body)
        self.stats.poisoned_one(self.function.name)
        self._delete(delivery)

    # visibility renewal for long invocations

    def _renew_loop(self) -> None:
        half = INVOCATION_VISIBILITY / 2
        while True:
            if not self._stop.is_set():
                self._stop.wait(5.0)
            else:
                with self._capacity:
                    if not self._in_flight:
                        return
                time.sleep(1.0)
            now = time.monotonic()
            with self._capacity:
                due = [d for d in self._in_flight.values() if now - d.renewed_at >= half]
            for delivery in due:
                self._renew(delivery)

    def _renew(self, delivery: _Delivery) -> None:
        """Renew the message's invisibility. As the host's renewal: a pop receipt that no
        longer matches (another delivery has the message, or an earlier renewal landed and
        its answer, the new receipt, was lost) ends renewing it for good; any other failure
        is tried again at the next pass."""
        with delivery.lock:
            if delivery.done or delivery.renewal_lost:
                return
            try:
                receipt = self._queue.update_message(
                    delivery.message.id,
                    delivery.pop_receipt,
                    visibility_timeout=INVOCATION_VISIBILITY,
                )
                if receipt.pop_receipt:  # an update always answers with a new receipt
                    delivery.pop_receipt = receipt.pop_receipt
                delivery.renewed_at = time.monotonic()
            except Exception as error:
                if isinstance(error, HttpResponseError) and taken_by_another_delivery(error):
                    delivery.renewal_lost = True
                    log.warning(
                        "%s: message %s is no longer ours to renew (its pop receipt does not "
                        "match: another delivery took it, or a renewal landed and its answer "
                        "was lost); not renewing it again, it reappears when its visibility ends",
                        self.function.name,
                        delivery.message.id,
                    )
                    return
                log.warning(
                    "%s: renewing visibility of message %s failed: %r",
                    self.function.name,
                    delivery.message.id,
                    error,
                )


def may_have_landed(answer: Any) -> bool:
    """Whether an attempt the SDK sent again may have been carried out: no answer at all, or
    any answer but 503 ServerBusy (which says it was not)."""
    return answer is None or getattr(answer, "status_code", None) != 503


def taken_by_another_delivery(error: HttpResponseError) -> bool:
    """Our pop receipt is stale: the message is gone, or it became visible again and another
    delivery dequeued it (404 MessageNotFound, or 400 PopReceiptMismatch)."""
    return isinstance(error, ResourceNotFoundError) or (
        getattr(error, "error_code", None) == "PopReceiptMismatch"
    )
