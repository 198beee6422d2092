"""`batches`: requests per item of a batch, new and replayed, beside one item at a time."""

from __future__ import annotations

import argparse

from bench import batches


def test_batches_counts_a_new_batch_near_the_floor_and_a_replay_in_one_listing(
    bench_env: str,
) -> None:
    result = batches.run(argparse.Namespace(items=20))
    assert result["batch_replay_requests"] == 1  # one List Blobs with metadata
    assert result["batch_replay_ran_again"] == 0
    assert 2.0 <= result["batch_new_requests_per_item"] <= 2.0 + 1 / 20
    assert result["batch_60pct_done_requests_per_item_left"] <= 2.0 + 1 / 8
    assert result["one_at_a_time_new_requests_per_item"] >= 2.0
    assert result["targets_met"]
