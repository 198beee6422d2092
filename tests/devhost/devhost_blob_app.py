"""A function app with one Event Grid-sourced blob trigger, for the devhost blob tests.

Settings: SAMPLE_CONTAINER, SAMPLE_RECORD_FILE, and for the refusal cases SAMPLE_BLOB_PATH
(the trigger's path as written; default "%SAMPLE_CONTAINER%/in/{name}"),
SAMPLE_BLOB_CONNECTION (default AzureWebJobsStorage) and SAMPLE_BLOB_SOURCE ("poll": the
polling source). Each invocation appends a JSON line;
a blob whose content starts with "fail" always fails.
"""

from __future__ import annotations

import json
import os

import azure.functions as func

app = func.FunctionApp()


@app.blob_trigger(
    arg_name="blob",
    path=os.environ.get("SAMPLE_BLOB_PATH") or "%SAMPLE_CONTAINER%/in/{name}",
    connection=os.environ.get("SAMPLE_BLOB_CONNECTION") or "AzureWebJobsStorage",
    source=(
        func.BlobSource.LOGS_AND_CONTAINER_SCAN
        if os.environ.get("SAMPLE_BLOB_SOURCE") == "poll"
        else func.BlobSource.EVENT_GRID
    ),
)
def sample_blob(blob: func.InputStream) -> None:
    content = blob.read()
    line = {
        "function": "sample_blob",
        "instance": os.environ.get("WEBSITE_INSTANCE_ID"),
        "type": type(blob).__name__,
        "name": blob.name,
        "length": blob.length,
        "uri": blob.uri,
        "content": content.decode(),
        "properties": blob.blob_properties,
        "metadata": blob.metadata,
    }
    with open(os.environ["SAMPLE_RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
    if content.startswith(b"fail"):
        raise RuntimeError("this blob always fails")
