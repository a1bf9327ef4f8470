"""`passkey[:N]`: N synthetic documents that each hide a five-digit key and ask for it at the end.

A small model trained on code never sees "The pass key is 40219 ... The pass key is" and answers
"a": passkey retrieval measures nothing on it, at any length. Mixed into pretraining
(`--corpus pystdlib+passkey`), these documents teach the retrieval itself at distances up to
about 1,000 tokens, so that `tinylm eval --tasks passkey:LEN` then measures what context
extension is about: whether attention still finds the key once it lies past the trained window.

Each document: a little filler, the needle in the words of the evaluation
(`data/passkey_words.py`), filler, and the question with its answer. Half the documents use the
evaluation's own filler (its five sentences in turn, from a random one), half sentences of their own:
measured on a `tiny` model trained 1,000 steps with only the latter, the key was found in 43% of
short training-style documents and in none of the evaluation's prompts, which it read as code. So the
evaluation tests what it is meant to, the reach of attention, not whether a 1M-parameter model
generalises a template. Keys and depths are drawn from a generator seeded by N: the corpus is the
same on every machine, and the evaluation draws its own keys.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.data.passkey_words import FILLER, NEEDLE, QUESTION
from tinylm.errors import TinyLMError

DEFAULT_DOCUMENTS = 12_000
SUBJECTS = ("The river", "A small boat", "The old clock", "My neighbour", "The north wind", "A red kite",
            "The market", "The library", "A tall tree", "The harbour", "The baker", "A quiet street",
            "The train", "An old map", "The garden wall", "A white cat", "The hill road", "The lamp")
PREDICATES = ("is calm today.", "moves slowly.", "was here before.", "looks very old.", "stands by the door.",
              "is far away.", "waits for the rain.", "is closed on Sunday.", "turns to the left.",
              "has a long name.", "is full of people.", "sleeps in the afternoon.", "comes back at noon.")
EVALUATION_SENTENCES = [f"{sentence.strip()}." for sentence in FILLER.split(".") if sentence.strip()]
MAX_BEFORE, MAX_BETWEEN = 8, 140  # filler sentences (about 7 tokens each) before the needle and after it


def passkey_document(rng: random.Random) -> str:
    """Filler, a needle with a fresh key, 0 to MAX_BETWEEN sentences of filler, the question answered.

    The filler between is log-uniform in length: most keys are asked for a few sentences later, where a
    small model first learns to find them, and some up to a thousand tokens later."""
    own = rng.random() < 0.5
    first = rng.randrange(len(EVALUATION_SENTENCES))

    def filler(sentences: int) -> str:
        if own:
            return "".join(f"{rng.choice(SUBJECTS)} {rng.choice(PREDICATES)} " for _ in range(sentences))
        return "".join(f"{EVALUATION_SENTENCES[(first + i) % len(EVALUATION_SENTENCES)]} " for i in range(sentences))

    key = rng.randrange(10_000, 100_000)
    before = filler(rng.randint(0, MAX_BEFORE))
    between = filler(int((MAX_BETWEEN + 1) ** rng.random()) - 1)
    return before + NEEDLE.format(key=key) + between + f"{QUESTION} {key}."


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
