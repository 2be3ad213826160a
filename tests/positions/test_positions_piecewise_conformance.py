"""The shared conformance suite again for the RoPE encodings with a piecewise distance, at windows of a few
tokens. At their default parameters (windows of hundreds of tokens) the suite's short sequences are plain RoPE;
here every regime and every hidden key occurs within its 7 to 10 tokens (64 for 4x the training length)."""

from __future__ import annotations

import pytest

import tests.positions.test_positions_conformance as suite

SMALL = {
    "rerope": {"window": 3},
    "self_extend": {"group_size": 2, "neighbor_window": 3},
    "dual_chunk": {"chunk_size": 5, "local_size": 1},
    "streaming": {"sinks": 2, "window": 3},
}


@pytest.fixture(autouse=True)
def small_windows(monkeypatch):
    config = suite.config

    def small(position: str, arch: str, **overrides):
        return config(position, arch, position_params=SMALL[position], **overrides)

    monkeypatch.setattr(suite, "config", small)


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_kv_cached_decoding_equals_full_pass(name: str, kv_heads: int) -> None:
    suite.test_kv_cached_decoding_equals_full_pass(name, "decoder", kv_heads)


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_kv_cached_decoding_of_a_left_padded_batch_equals_full_pass(name: str, kv_heads: int) -> None:
    suite.test_kv_cached_decoding_of_a_left_padded_batch_equals_full_pass(name, "decoder", kv_heads)


@pytest.mark.parametrize("name", SMALL)
def test_left_padding_with_position_ids_equals_each_row_alone(name: str) -> None:
    suite.test_left_padding_with_position_ids_equals_each_row_alone(name, "decoder")


@pytest.mark.parametrize("name", SMALL)
def test_sdpa_and_eager_paths_agree(name: str) -> None:
    suite.test_sdpa_and_eager_paths_agree(name, "decoder")


@pytest.mark.parametrize("name", SMALL)
def test_causal_attention_in_blocks_of_queries_changes_no_output_or_gradient(name: str, monkeypatch) -> None:
    suite.test_causal_attention_in_blocks_of_queries_changes_no_output_or_gradient(name, "decoder", monkeypatch)


@pytest.mark.parametrize("name", SMALL)
def test_four_times_the_training_length(name: str) -> None:
    suite.test_four_times_the_training_length(name, "decoder")


@pytest.mark.parametrize("name", SMALL)
def test_bfloat16_forward_runs(name: str) -> None:
    suite.test_bfloat16_forward_runs(name, "decoder")


@pytest.mark.parametrize("name", SMALL)
def test_computing_once_per_forward_changes_no_output_or_gradient(name: str, monkeypatch) -> None:
    suite.test_computing_once_per_forward_changes_no_output_or_gradient(name, "decoder", monkeypatch)


@pytest.mark.parametrize("return_logits", [True, False])
@pytest.mark.parametrize("name", SMALL)
def test_compiles_to_one_graph_exactly_when_it_says_so(name: str, return_logits: bool) -> None:
    suite.test_compiles_to_one_graph_exactly_when_it_says_so(name, "decoder", return_logits)


@pytest.mark.parametrize("name", SMALL)
def test_each_encoding_builds_alone_from_sizes(name: str) -> None:
    suite.test_each_encoding_builds_alone_from_sizes(name)
