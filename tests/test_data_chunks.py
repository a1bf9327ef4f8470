"""Long documents are cut at line breaks before the split; short ones are left exactly as they are."""

from __future__ import annotations

from tinylm.data.chunks import MAX_DOCUMENT_CHARS, cut_document, cut_documents


def test_short_documents_are_untouched() -> None:
    text = "x" * (MAX_DOCUMENT_CHARS - 1) + "\n"  # exactly the limit
    assert cut_document(text) == [text]
    assert len(cut_document(text + "y")) == 2
    assert cut_document("x" * 100, max_chars=0) == ["x" * 100]  # 0: never cut


def test_pieces_end_after_the_last_line_break_that_fits() -> None:
    text = "".join(f"{i:03d} " * (i % 7) + "\n" for i in range(200))
    pieces = cut_document(text, max_chars=100)
    assert "".join(pieces) == text and all(len(p) <= 100 for p in pieces)
    assert all(p.endswith("\n") for p in pieces)
    for piece, following in zip(pieces, pieces[1:]):  # the next line would not have fitted
        assert len(piece) + following.index("\n") + 1 > 100


def test_a_line_longer_than_the_limit_is_cut_at_the_limit() -> None:
    text = "short\n" + "y" * 250 + "\nend\n"
    assert [len(p) for p in cut_document(text, max_chars=100)] == [6, 100, 100, 50 + 1 + 4]
    assert list(cut_documents(["a\n" * 3, "b" * 5], max_chars=4)) == ["a\na\n", "a\n", "bbbb", "b"]
