"""Exceptions: one per error category of the protocol (section 4.4), and
the client's own for a lost connection, a reply that did not come in time
and a reply that breaks the protocol."""

from __future__ import annotations

from typing import Dict, Tuple, Type, Union

__all__ = [
    "RelaydError",
    "ProtocolError",
    "BadJSONError",
    "LineTooLongError",
    "UnauthenticatedError",
    "BadRequestError",
    "UnknownKindError",
    "BusyError",
    "ShuttingDownError",
    "NotFoundError",
    "ConnectionLostError",
    "ReplyTimeoutError",
    "UnexpectedReplyError",
    "ResultCarrierError",
    "IgnoredFieldsWarning",
]


class RelaydError(Exception):
    """Base of every error this package raises about relayd."""


class ProtocolError(RelaydError):
    """relayd answered with an ``error`` message.

    ``category`` is the protocol's category (``bad-request``, ...),
    ``message`` relayd's sentence for people, ``id`` the echoed request id
    (None when relayd could not read one). A category this client does not
    know raises ProtocolError itself.
    """

    category: str = ""

    def __init__(self, category: str, message: str, id: Union[int, str, None] = None) -> None:
        super().__init__(f"relayd: {category}: {message}")
        self.category = category
        self.message = message
        self.id = id
        # The fields of the request relayd did not know (protocol 4.6).
        self.ignored: Tuple[str, ...] = ()


class BadJSONError(ProtocolError):
    """``bad-json``: a message line was not JSON (the connection stays open)."""

    category = "bad-json"


class LineTooLongError(ProtocolError):
    """``line-too-long``: a message exceeded relayd's --max-line-bytes; relayd closed the connection."""

    category = "line-too-long"


class UnauthenticatedError(ProtocolError):
    """``unauthenticated``: missing or wrong token; relayd closed the connection."""

    category = "unauthenticated"


class BadRequestError(ProtocolError):
    """``bad-request``: a field had the wrong type or value; nothing ran."""

    category = "bad-request"


class UnknownKindError(ProtocolError):
    """``unknown-kind``: relayd does not know the message kind."""

    category = "unknown-kind"


class BusyError(ProtocolError):
    """``busy``: an execution already runs on this connection, or relayd
    refused the connection (--max-connections)."""

    category = "busy"


class ShuttingDownError(ProtocolError):
    """``shutting-down``: relayd is stopping and starts nothing new."""

    category = "shutting-down"


class NotFoundError(ProtocolError):
    """``not-found``: ``attach`` named an execution relayd does not hold (protocol 4.5)."""

    category = "not-found"


class FailedError(ProtocolError):
    """``failed``: a file changed while relayd sent its body (protocol 4.6,
    "Bulk bodies"; the bytes received are not the file, and the connection
    serves on), or a shell session's command whose status cannot be
    trusted (something an earlier command left in the shell) or did not
    come (protocol 4.7, "Whose status"; run checks that must be trusted in
    a fresh execution)."""

    category = "failed"


CATEGORIES: Dict[str, Type[ProtocolError]] = {
    cls.category: cls
    for cls in (
        BadJSONError,
        LineTooLongError,
        UnauthenticatedError,
        BadRequestError,
        UnknownKindError,
        BusyError,
        ShuttingDownError,
        NotFoundError,
        FailedError,
    )
}

# Categories after which relayd closes the connection (protocol 4.4).
CLOSING = frozenset({"unauthenticated", "line-too-long"})


def error_for(category: str, message: str, id: Union[int, str, None] = None) -> ProtocolError:
    """The exception for an ``error`` message's category."""
    cls = CATEGORIES.get(category)
    if cls is None:
        return ProtocolError(category, message, id)
    return cls(category, message, id)


class ConnectionLostError(RelaydError, ConnectionError):
    """The connection ended (or failed) before the awaited reply was whole:
    relayd exited, was killed, or the network failed. ``partial`` is how
    many bytes of an unfinished reply line had arrived (0: none)."""

    def __init__(self, message: str, partial: int = 0) -> None:
        super().__init__(message)
        self.partial = partial


class ReplyTimeoutError(RelaydError, TimeoutError):
    """The reply did not come within the client's deadline. The client has
    closed the connection, which relayd treats as the controller going away
    (transport loss): it settles whatever ran."""


class UnexpectedReplyError(RelaydError):
    """relayd sent something this client cannot take: not JSON, a reply of
    the wrong kind, or a reply with a wrong token. The connection is closed."""


class ResultCarrierError(RelaydError, ValueError):
    """write_result cannot write a frame: no MAKA_EVAL_RESULT_TOKEN, a
    malformed one, or a payload that is not UTF-8 or is over 2048 bytes."""



class IgnoredFieldsWarning(UserWarning):
    """relayd answered a request but did not know some of its top-level
    fields (protocol 4.6, ``ignored``): a misspelled field (``timeout_ms``),
    or one newer than that relayd; a field that differs from a known one
    only by case (``timeoutMS``) is a BadRequestError instead. The fields
    had no effect. Issued with the warnings module, once per reply, pointing at the caller's line;
    ``warnings.simplefilter("error", IgnoredFieldsWarning)`` makes it an
    exception, and ``ignored`` on the reply (or the ProtocolError) holds
    the names."""
