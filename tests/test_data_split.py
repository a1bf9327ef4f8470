"""The dev split: a stable hash of each document's text, nothing else."""

from __future__ import annotations

from tinylm.data.split import dev_score, is_dev


def test_score_is_a_fixed_function_of_the_text() -> None:
    # pinned values: a change here would silently move documents between train and dev
    assert f"{dev_score(b'hello'):.12f}" == "0.655135015027"
    assert f"{dev_score(b''):.12f}" == "0.893167516090"
    assert 0 <= dev_score(bytes(range(256))) < 1


def test_fraction_is_respected_and_monotone() -> None:
    documents = [f"document number {i}".encode() for i in range(20000)]
    for fraction in (0.01, 0.1, 0.5):
        share = sum(is_dev(d, fraction) for d in documents) / len(documents)
        assert abs(share - fraction) < 0.25 * fraction + 0.002
    # raising the fraction only adds documents to dev, never moves one back to train
    assert all(is_dev(d, 0.2) for d in documents if is_dev(d, 0.1))


def test_duplicates_share_a_split() -> None:
    text = b"the same text twice"
    assert is_dev(text, 0.5) == is_dev(bytes(text), 0.5)
