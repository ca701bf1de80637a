"""Errors users see, each with a message that says what to change."""


class TercetError(Exception):
    """Base class for errors tercet reports to the user without a traceback."""


class ConfigError(TercetError):
    """A configuration key, value or plugin name is not valid."""


class RequestError(TercetError):
    """A request is invalid; the server answers it with a 4xx and keeps serving."""

    def __init__(self, message: str, param: str | None = None, status_code: int = 400):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_code = status_code
