"""The one reader of user rows: SFT conversations, preference pairs, RL prompt files, task and evaluation files.

A data spec is a local file or `hf:NAME[:CONFIG][:SPLIT]`, and every command reads it here, the same way:

    hf_spec.py      the one grammar of `hf:` (corpora use it too, and the folder names made from it)
    hf_dataset.py   a Hugging Face split opened one way: a saved folder, a local file, a folder or the Hub
    files.py        a local file by its suffix: JSONL, a JSON array, CSV/TSV with a header
    undecodable.py  bytes that are not UTF-8: U+FFFD, counted and noted, refused when most are
    error.py        RowError, the one exception for a row that cannot be read
    read.py         `read_rows`: each row with its place (FILE:LINE, FILE[INDEX], FILE:row N, NAME[split]:INDEX),
                    parsed by the caller, a bad row stopping the read or skipped and counted (`on_error`)

What a row means (messages, a chosen/rejected pair, a prompt and its answer) is the caller's parser; how
it is read, placed, decoded and refused is here, so a malformed row reads the same in every command.
"""
