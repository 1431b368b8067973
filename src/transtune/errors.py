"""User-facing errors: the CLI prints their message on one line and exits non-zero."""


class TranstuneError(Exception):
    """Base class of errors caused by bad input rather than by a bug."""


class UnknownModelError(TranstuneError, ValueError):
    """A model name that the zoo does not know."""


class ModelImportError(TranstuneError):
    """A model file that is missing, malformed, or uses what the frontend cannot take."""


class TargetError(TranstuneError):
    """A target that cannot be built or that this host cannot run."""


def error_line(err: BaseException, limit: int = 300) -> str:
    """The most telling line of a (possibly multi-line, TVM-formatted) error message."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "not supported" in line:
            return line[:limit]
    return (lines[-1] if lines else type(err).__name__)[:limit]
