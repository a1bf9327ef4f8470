"""HellaSwag's document processing for the local tasks: lm-eval's own function, so both tools read rows alike."""

from lm_eval.tasks.hellaswag.utils import process_docs

__all__ = ["process_docs"]
