"""Exceptions raised by the records package."""

from __future__ import annotations


class RecordsError(Exception):
    """Base class for every error the tuning database raises."""


class ForeignDatabaseError(RecordsError):
    """The file exists but is not a tuning database written by this package."""


class SchemaVersionError(RecordsError):
    """The database uses a schema version this code cannot read."""
