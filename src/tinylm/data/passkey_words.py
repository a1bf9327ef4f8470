"""The words of passkey retrieval (Mohtashami & Jaggi 2023), shared by the evaluation
(evaluate/long_context.py) and the corpus that teaches it (passkey_corpus.py). Strings only, here below
both, so preparing data never imports torch or the evaluations."""

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"
