"""SQLite tuning database: measurement records, best-config queries, JSONL exchange."""

from .database import TuningDatabase
from .errors import ForeignDatabaseError, RecordsError, SchemaVersionError
from .record import CONFIRM_LABEL, MeasurementRecord, config_key
from .schema import APP_ID, SCHEMA_VERSION

__all__ = [
    "APP_ID",
    "CONFIRM_LABEL",
    "SCHEMA_VERSION",
    "ForeignDatabaseError",
    "MeasurementRecord",
    "RecordsError",
    "SchemaVersionError",
    "TuningDatabase",
    "config_key",
]
