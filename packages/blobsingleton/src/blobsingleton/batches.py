"""What `fn.each(items)` returns for a batch: one `ItemResult` per item, in a `BatchResult`
(README, "Batches")."""

from blobsingleton._batch import BatchResult, ItemOutcome, ItemResult

__all__ = ["BatchResult", "ItemOutcome", "ItemResult"]
