"""The service's log lines on stderr, the same in the server and its encoding children: text
(time, logger, level, message) or, for a log shipper, one JSON object per line.

Light on purpose: an encoding child imports it (and no web framework) to log as its server does.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime

#: `--log-level` names and what they mean to `logging`.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
LEVELS["error"] = logging.ERROR
#: `--log-format` names.
FORMATS = ("text", "json")
#: The service's own loggers; any other (a library's, Python's warnings) logs through the root
#: logger, at WARNING or above, in the same format.
OWN = ("probembed.service", "uvicorn.error")
#: The access log: each line a JSON object written by the gate, in either format.
ACCESS = "probembed.access"


@dataclass(frozen=True)
class LogSettings:
    """How much the service logs, and in which format (`--log-level`, `--log-format`)."""

    level: str = "info"
    format: str = "text"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"--log-level must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.format not in FORMATS:
            raise ValueError(
                f"--log-format must be one of {', '.join(FORMATS)}, got {self.format!r}"
            )


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time (UTC, ISO 8601), level, logger, message, and the
    traceback, if any, as one string (a multi-line traceback was as many log records)."""

    def format(self, record: logging.LogRecord) -> str:
        """One line, whatever the message holds."""
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


#: Info lines in text, as a server started without `--log-level` and `--log-format` logs.
DEFAULT_LOGS = LogSettings()


def configure_logging(settings: LogSettings = DEFAULT_LOGS) -> None:
    """One line per event on stderr in the chosen format; an access line is a JSON object
    alone in either (a prefix of time, logger and level made it none); everything else that
    logs through `logging` (libraries, Python's warnings) at WARNING or above, in the same
    format."""
    formatter = (
        JsonFormatter()
        if settings.format == "json"
        else logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    )
    events = logging.StreamHandler(sys.stderr)
    events.setFormatter(formatter)
    access = logging.StreamHandler(sys.stderr)
    access.setFormatter(logging.Formatter("%(message)s"))
    level = LEVELS[settings.level]
    for name in (*OWN, ACCESS):
        logger = logging.getLogger(name)
        logger.handlers[:] = [access if name == ACCESS else events]
        logger.setLevel(level)
        logger.propagate = False
    root = logging.getLogger()
    root.handlers[:] = [events]
    root.setLevel(logging.WARNING)  # whatever --log-level, as its help says
    _log_warnings()


def _log_warnings() -> None:
    """Each distinct Python warning once, as one line of the `py.warnings` logger: Python's own
    form is three lines (file:line, the source line, a blank one), repeated for probembed's."""
    shown: set[str] = set()
    logger = logging.getLogger("py.warnings")

    def show(message: Warning | str, category: type[Warning], *_: object) -> None:
        text = f"{category.__name__}: {message}"
        if text not in shown:
            shown.add(text)
            logger.warning("%s", text)

    warnings.showwarning = show  # type: ignore[assignment]  # called positionally
