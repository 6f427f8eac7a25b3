"""Exceptions that daliloader raises on purpose: each message names the file or argument at fault."""


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


#: What every message about a bad file advises.
WHAT_TO_DO = ("Run `daliloader check` on the dataset (or `daliloader.check(data)`) to list every bad file, "
              "then fix or remove them.")
