"""Exceptions that daliloader raises on purpose: each message names the file or argument at fault."""

import os
import sys


class DaliloaderError(Exception):
    """Base class of daliloader's own errors."""


class DataError(DaliloaderError, ValueError):
    """The dataset on disk is not usable as given (missing, unpaired or malformed files)."""


class SpecError(DaliloaderError, ValueError):
    """An argument of a loader call is invalid."""


class LoadError(DaliloaderError, RuntimeError):
    """Loading a batch failed; the message names the files involved."""


class MissingDependency(DaliloaderError, ImportError):
    """A backend needs a package that is not installed; the message says what to install."""


def user_stacklevel() -> int:
    """The ``stacklevel`` of a ``warnings.warn`` call inside daliloader that points at the first frame
    outside the package: the user's line, however deep the call came through the package."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


#: What every message about a bad file advises.
WHAT_TO_DO = ("Run `daliloader check` on the dataset (or `daliloader.check(data)`) to list every bad file, "
              "then fix or remove them.")
