"""Build a tokenizer and train/dev token shards from a corpus.

With no options it tokenizes the Python standard library's source (present on every machine, no
download) with a 4096-token byte-level BPE into a per-user data folder, where `tinylm train` finds it.

corpora (--corpus):
  pystdlib                    the running interpreter's standard library (default)
  PATH                        a .txt/.md/.py/.jsonl/.parquet file, a folder (recursive) or a glob
  hf:NAME[:CONFIG][:SPLIT]    a Hugging Face dataset (streamed; needs the datasets extra)
  passkey[:N]                 N synthetic documents (default 12000) that hide a five-digit key in filler
                              and ask for it at the end: retrieval for a context extension to measure
  passkey:N:LEN[:far]         N longer than LEN tokens, the key asked for from up to LEN tokens back (:far:
                              mostly far back): data to extend on (train --long-documents --document-ends)
  A+B                         several of these as one corpus (pystdlib+passkey)

tokenizers (--tokenizer):
  bpe                         byte-level BPE trained on the train split (--vocab-size, default 4096)
  bpe-digits                  the same with every digit its own piece, so no token holds two digits
                              (StarCoder's and SmolLM's split): numbers are spelled one way everywhere
  r50k                        GPT-2's encoding via tiktoken (needs its file locally; vocab padded to 50304)
  PATH                        an existing tokenizer.json (or a folder holding one)

Documents longer than --max-document-chars are cut at line breaks, so one large text file is enough;
when hashing documents into train and dev leaves a split shorter than a window (a handful of
files), the dev split is the tail of the tokens instead, and prepare says so. Skipped files and bytes
that are not UTF-8 are reported on stderr; a corpus more than 10% U+FFFD is refused unless
--allow-invalid-utf8.

Running it again with the same options reuses the result; a folder holding another config is only
replaced with --force.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tinylm.cli.options import add_option
from tinylm.data.chunks import MAX_DOCUMENT_CHARS
from tinylm.errors import TinyLMError
from tinylm.options import PROGRESS

HELP = "build a tokenizer and token shards from a corpus"
DEFAULT_VOCAB = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", default="pystdlib",
                        help="pystdlib, a path or glob, or hf:NAME[:CONFIG][:SPLIT] (default: pystdlib)")
    parser.add_argument("--tokenizer", default="bpe",
                        help="bpe, bpe-digits, r50k, or a tokenizer.json path (default: bpe)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"BPE vocabulary size, the 256 bytes and the special tokens included "
                             f"(default: {DEFAULT_VOCAB})")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: a per-user data folder that tinylm train uses)")
    parser.add_argument("--force", action="store_true", help="replace a folder prepared with other options")
    parser.add_argument("--dev-fraction", type=float, default=0.01,
                        help="share of documents held out for evaluation, chosen by hash (default: 0.01)")
    parser.add_argument("--text-field", default="text",
                        help="field holding the text in .jsonl/.parquet/hf rows (default: text)")
    parser.add_argument("--context-length", type=int, default=256,
                        help="each split must hold one window of this many tokens + 1 (default: 256)")
    parser.add_argument("--max-document-chars", type=int, default=MAX_DOCUMENT_CHARS, metavar="N",
                        help=f"cut longer documents at line breaks before the split (0: never; default: "
                             f"{MAX_DOCUMENT_CHARS})")
    parser.add_argument("--allow-invalid-utf8", action="store_true",
                        help="prepare a corpus even if more than 10%% of its characters are U+FFFD replacements")
    add_option(parser, "progress", PROGRESS, True, note="nor status lines (notes about the input are still printed)")


def run(args: argparse.Namespace) -> int:
    from tinylm.data.prepare import TRAINED, prepare_dataset  # here: this module stays free of tokenizers and numpy
    from tinylm.data.shards import check_data_dir  # (as above)

    if args.vocab_size is not None and args.tokenizer not in TRAINED:
        raise TinyLMError(f"--vocab-size applies to --tokenizer bpe or bpe-digits only "
                          f"({args.tokenizer} has a fixed vocabulary)")
    out = prepare_dataset(corpus=args.corpus, tokenizer=args.tokenizer,
                          vocab_size=DEFAULT_VOCAB if args.vocab_size is None else args.vocab_size,
                          out=args.out, force=args.force, dev_fraction=args.dev_fraction,
                          text_field=args.text_field, progress=args.progress,
                          context_length=args.context_length, max_document_chars=args.max_document_chars,
                          allow_invalid_utf8=args.allow_invalid_utf8)
    sidecars = check_data_dir(out)
    train, dev = sidecars["train"], sidecars["dev"]
    print(f"{out}  tokenizer {train['tokenizer']} (model vocab {train['vocab_size']}), "
          f"train {train['tokens']:,} tokens / {train['documents']} docs, "
          f"dev {dev['tokens']:,} tokens / {dev['documents']} docs")
    return 0
