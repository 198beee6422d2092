"""`bench._storage`: the emulator a benchmark measures is the one it talks to."""

from __future__ import annotations

from bench._storage import azurite_process
from harness import services
from tests.support import AppSettings


def test_azurite_process_is_the_one_serving_the_configured_account(
    bench_env: str, azurite: services.Azurite, app_settings: AppSettings
) -> None:
    """A test process may have started several emulators (the session's, one of a test's
    own): the CPU a benchmark reports must be the one its requests went to."""
    with services.azurite() as other:
        for served in (azurite, other):
            app_settings.set({"AzureWebJobsStorage": served.connection_string})
            process = azurite_process()
            assert process is not None
            command = process.cmdline()
            assert command[command.index("--blobPort") + 1] == str(served.blob_port)
