"""The words of passkey retrieval (Mohtashami & Jaggi 2023), shared by the evaluation and the corpus that
teaches it (data/passkey_corpus.py). A module of strings only, so preparing data never imports torch."""

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"
