"""The command lines' argument parser: a usage error is one line on stderr and exit 2, like every other input error
of the platform (argparse's own prints the whole usage first), with any URL password in the message masked."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["ArgumentParser", "max_failures", "one_line"]


def one_line(message: str) -> str:
    """``message`` folded onto one line, a URL's password masked."""
    from study.tracking.credentials import mask_passwords  # defers Optuna (its storages load with it): only on an error

    return mask_passwords(" ".join(message.split()))


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are ``PROG: error: MESSAGE`` on one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def max_failures(text: str) -> int:
    """``--max-failures``: a number of retries, or -1 for always (an :mod:`argparse` type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (retry always) or a count >= 0, got {value}")
    return value
