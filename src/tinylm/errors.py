"""One exception type for user mistakes, so the CLI can print one clear line instead of a traceback."""


class TinyLMError(Exception):
    """A problem the user can fix (bad path, impossible config, corrupt checkpoint...)."""
