"""`passkey[:N[:LEN[:far]]]`: N synthetic documents that each hide a five-digit key and ask for it at the end.

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

`passkey:N:LEN` documents are the evaluation's shape at LEN tokens, for the extension itself: the key
is asked for across a distance drawn uniformly from nothing to about the whole of LEN, as the
evaluation's depths 0 to 1 ask, and filler before the needle makes every document longer than LEN.
Rows drawn anywhere rarely hold both a far needle and its question (a key 900 tokens back is in a
1,024-token row only when the question lands in its last tenth), so `tinylm train --long-documents
--document-ends` reads each of these as its last LEN + 1 tokens, the question at the row's end.
`passkey:N:LEN:far` draws the distance with a density rising linearly to LEN, three quarters of the keys
in the far half, where retrieval is hardest.

The corpus is written before any tokenizer exists, so lengths are sized in characters at the filler's
CHARS_PER_TOKEN, measured with the `tiny` BPE: under a tokenizer that packs more characters in a token
the far keys come nearer, and documents it makes shorter than a row are not drawn.
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
CHARS_PER_TOKEN = {"evaluation": 3.75, "own": 4.3}  # each filler's, measured with the `tiny` BPE
MAX_CHARS_PER_TOKEN = 4.5  # documents this many characters a token long hold more than LEN tokens
NEEDLE_TOKENS, QUESTION_TOKENS = 20, 16  # with the `tiny` BPE; the question with its answer and end-of-text
ROOM_FOR_KEY = 40  # the least LEN: room for the needle, the question and a little filler


class Filler:
    """One document's filler: the evaluation's sentences in turn (each stretch from the same random one), or
    sentences made up."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.own = rng, rng.random() < 0.5
        self.first = rng.randrange(len(EVALUATION_SENTENCES))
        self.chars_per_token = CHARS_PER_TOKEN["own" if self.own else "evaluation"]

    def sentence(self, index: int) -> str:
        if self.own:
            return f"{self.rng.choice(SUBJECTS)} {self.rng.choice(PREDICATES)} "
        return f"{EVALUATION_SENTENCES[(self.first + index) % len(EVALUATION_SENTENCES)]} "

    def sentences(self, count: int) -> str:
        return "".join(self.sentence(i) for i in range(count))

    def chars(self, count: int) -> str:
        """Whole sentences up to about `count` characters (the last one may end past it)."""
        parts, total = [], 0
        while total < count:
            parts.append(self.sentence(len(parts)))
            total += len(parts[-1])
        return "".join(parts)


def passkey_document(rng: random.Random) -> str:
    """Filler, a needle with a fresh key, 0 to MAX_BETWEEN sentences of filler, the question answered.

    The filler between is log-uniform in length: most keys are asked for a few sentences later, where a
    small model first learns to find them, and some up to a thousand tokens later."""
    filler = Filler(rng)
    key = rng.randrange(10_000, 100_000)
    before = filler.sentences(rng.randint(0, MAX_BEFORE))
    between = filler.sentences(int((MAX_BETWEEN + 1) ** rng.random()) - 1)
    return before + NEEDLE.format(key=key) + between + f"{QUESTION} {key}."


def long_passkey_document(rng: random.Random, length: int, far: bool = False) -> str:
    """The evaluation's shape at `length` tokens: the key asked for across a uniform distance up to all of
    them (the needle at the very start of the document's last `length` tokens, as depth 0 puts it), and
    filler before the needle to more than `length` tokens in all."""
    filler = Filler(rng)
    key = rng.randrange(10_000, 100_000)
    reach = round((length - NEEDLE_TOKENS - QUESTION_TOKENS) * filler.chars_per_token)
    # far: the distance's density rises linearly to the row's length (three quarters in its far half)
    between = filler.chars(round(reach * rng.random() ** 0.5) if far else rng.randrange(reach + 1))
    before = filler.chars(round(length * MAX_CHARS_PER_TOKEN) - len(between))
    return before + NEEDLE.format(key=key) + between + f"{QUESTION} {key}."


def passkey_corpus(spec: str) -> Corpus:
    """The corpus `passkey` (DEFAULT_DOCUMENTS documents), `passkey:N`, or `passkey:N:LEN` (long ones)."""
    _, _, numbers = spec.partition(":")
    count, _, length_text = numbers.partition(":")
    length_text, _, shape = length_text.partition(":")
    if shape not in ("", "far"):
        raise TinyLMError(f"--corpus {spec}: passkey:N:LEN:far is the only shape a passkey corpus takes")
    try:
        documents = int(count) if count else DEFAULT_DOCUMENTS
    except ValueError:
        documents = 0
    if documents < 1:
        raise TinyLMError(f"--corpus {spec}: passkey:N takes a positive number of documents")
    length = 0
    if length_text:
        length = int(length_text) if length_text.isdigit() else 0
        if length <= ROOM_FOR_KEY:
            raise TinyLMError(f"--corpus {spec}: passkey:N:LEN takes a length in tokens above {ROOM_FOR_KEY}, "
                              "room for the key, its question and some filler")

    def read(stats: ReadStats) -> Iterator[str]:
        rng = random.Random(documents if not length else f"passkey:{documents}:{length}")
        for _ in range(documents):
            yield long_passkey_document(rng, length, shape == "far") if length else passkey_document(rng)

    if length:
        tail = f":{shape}" if shape else ""
        return Corpus(spec=f"passkey:{documents}:{length}{tail}",
                      fingerprint=f"passkey-long-v2-{documents}-{length}{tail}", read=read)
    return Corpus(spec=f"passkey:{documents}", fingerprint=f"passkey-v1-{documents}", read=read)
