"""tinylm: train language models from scratch, one readable building block per file."""

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

__all__ = ["ModelConfig", "TinyLMError", "__version__"]
__version__ = "0.1.0"
