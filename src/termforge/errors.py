"""Errors a user can act on: the CLI prints their message alone, without a traceback."""


class TermforgeError(Exception):
    """Bad input or an unrecoverable stage failure, with a message naming the culprit."""


class ConfigError(TermforgeError):
    """A config value is wrong; the message names the key path and what was expected."""
