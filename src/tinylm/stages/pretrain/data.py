"""Finding the training data before anything expensive happens.

`tinylm train` with no `--data` uses the default corpus (the Python standard library's source,
present on every machine) with a BPE of the model's vocabulary size (r50k for 50k vocabularies), preparing
it on first use. Either way the folder is checked against the model's vocabulary before the model
is built: a mismatch is a one-line error, not a CUDA index assert ten minutes later.
"""

from __future__ import annotations

from pathlib import Path

from tinylm.config import ModelConfig
from tinylm.data import prepare  # called through its module: looked up at each call, so a test can stand in for it
from tinylm.data.folders import default_data_dir
from tinylm.data.shards import check_data_dir
from tinylm.errors import TinyLMError
from tinylm.runtime.distributed import DistEnv, all_gather_objects, barrier

DEFAULT_CORPUS = "pystdlib"


def default_tokenizer(vocab_size: int) -> str:
    """BPE of the model's vocabulary size; GPT-2's r50k for the 50304-token presets (training a 50k BPE
    on 11 MB would give mostly useless merges)."""
    return "r50k" if vocab_size >= 50257 else "bpe"


def prepare_default_data(model_config: ModelConfig, env: DistEnv, progress: bool = True) -> Path:
    """The default corpus, prepared on rank 0 if missing (the other ranks wait), as a data folder."""
    tokenizer = default_tokenizer(model_config.vocab_size)
    path = default_data_dir(DEFAULT_CORPUS, tokenizer, model_config.vocab_size)
    error = None
    if env.is_main:
        try:
            check_data_dir(path, vocab_size=model_config.vocab_size)
        except TinyLMError:
            try:
                path = prepare.prepare_dataset(corpus=DEFAULT_CORPUS, tokenizer=tokenizer,
                                               vocab_size=model_config.vocab_size, progress=progress,
                                               context_length=model_config.context_length)
            except TinyLMError as exc:
                error = str(exc)
    path_str, error = all_gather_objects((str(path), error), env)[0]
    barrier(env)
    if error:
        raise TinyLMError(error)
    return Path(path_str)


def resolve_data_dir(data: str | None, model_config: ModelConfig, env: DistEnv, progress: bool = True) -> Path:
    """The checked data folder for this model: `data`, or the default corpus prepared on demand."""
    # absolute: the run records it, and a checkpoint read from another folder must still find its data
    path = prepare_default_data(model_config, env, progress) if data is None else Path(data).absolute()
    check_data_dir(path, vocab_size=model_config.vocab_size)
    return path
