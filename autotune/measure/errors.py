"""Error kinds reported by the measurement pipeline."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a candidate could not be measured; a str, so it serialises as its value."""

    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUNTIME_CRASH = "runtime_crash"
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"
    INVALID_SCHEDULE = "invalid_schedule"
    RUNTIME_ERROR = "runtime_error"
