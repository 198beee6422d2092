"""The app's flows, one package each: notifications (an event emailed once), imports (nightly
per-account member imports), jobs (batch completion announced once); with the queue-message
parsing, poison handling, storage clients, logging and operator views they share. Leases and
run-once records come from the `blobsingleton` library."""
