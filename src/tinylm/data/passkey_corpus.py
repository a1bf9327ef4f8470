"""`passkey[:N]`: N synthetic documents that each hide a five-digit key and ask for it at the end.

A small model trained on code never sees "The pass key is 40219 ... The pass key is" and answers
"a": passkey retrieval measures nothing on it, at any length. Mixed into pretraining
(`--corpus pystdlib+passkey`), these documents teach the retrieval itself at distances up to
about 1,000 tokens, so that `tinylm eval --tasks passkey:LEN` then measures what context
extension is about: whether attention still finds the key once it lies past the trained window.

Each document: a little filler, the needle in the words of the evaluation
(`evaluate/long_context.py`), filler, and the question with its answer. The filler is drawn
from its own sentences, none of which is in the evaluation's filler, and the keys are drawn
from a generator seeded by N, so the corpus is the same on every machine and the evaluation's
keys and filler are never trained on as a whole.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.errors import TinyLMError

DEFAULT_DOCUMENTS = 6000
SUBJECTS = ("The river", "A small boat", "The old clock", "My neighbour", "The north wind", "A red kite",
            "The market", "The library", "A tall tree", "The harbour", "The baker", "A quiet street",
            "The train", "An old map", "The garden wall", "A white cat", "The hill road", "The lamp")
PREDICATES = ("is calm today.", "moves slowly.", "was here before.", "looks very old.", "stands by the door.",
              "is far away.", "waits for the rain.", "is closed on Sunday.", "turns to the left.",
              "has a long name.", "is full of people.", "sleeps in the afternoon.", "comes back at noon.")
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is {key}."
MAX_BEFORE, MAX_BETWEEN = 8, 140  # filler sentences (about 7 tokens each) before the needle and after it


def passkey_document(rng: random.Random) -> str:
    """Filler, a needle with a fresh key, 0 to MAX_BETWEEN sentences of filler, the question answered.

    The filler between is log-uniform in length: most keys are asked for a few sentences later, where a
    small model first learns to find them, and some up to a thousand tokens later."""
    def filler(sentences: int) -> str:
        return "".join(f"{rng.choice(SUBJECTS)} {rng.choice(PREDICATES)} " for _ in range(sentences))

    key = rng.randrange(10_000, 100_000)
    before = filler(rng.randint(0, MAX_BEFORE))
    between = filler(int((MAX_BETWEEN + 1) ** rng.random()) - 1)
    return before + NEEDLE.format(key=key) + between + QUESTION.format(key=key)


def passkey_corpus(spec: str) -> Corpus:
    """The corpus `passkey` (DEFAULT_DOCUMENTS documents) or `passkey:N`."""
    _, _, count = spec.partition(":")
    try:
        documents = int(count) if count else DEFAULT_DOCUMENTS
    except ValueError:
        documents = 0
    if documents < 1:
        raise TinyLMError(f"--corpus {spec}: passkey:N takes a positive number of documents")

    def read(stats: ReadStats) -> Iterator[str]:
        rng = random.Random(documents)
        for _ in range(documents):
            yield passkey_document(rng)

    return Corpus(spec=f"passkey:{documents}", fingerprint=f"passkey-v1-{documents}", read=read)
