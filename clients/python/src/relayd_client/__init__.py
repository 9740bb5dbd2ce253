"""relayd_client: the controller's side of relayd's wire protocol, and the
subject's side of its result carrier. Standard library only.

    from relayd_client import Client
    with Client("127.0.0.1:7700", token) as relayd:
        r = relayd.execute("sh", ["-c", "make test"], timeout_ms=600_000)
        print(r.exit_code, r.termination, r.settlement, len(r.survivors))

Client is blocking; AsyncClient is for asyncio. serve() (blocking) and
AsyncListener take relayds that dial out (relayd --connect) and match each
to its trial by token. write_result(payload) is for the subject: it hands
back a result through the carrier. Errors relayd reports raise one
exception per category (BadRequestError, BusyError, ...), all ProtocolError;
a lost connection raises ConnectionLostError, a reply that did not come in
time ReplyTimeoutError; all are RelaydError.
"""

from .aio import AsyncClient, AsyncListener, AsyncSession
from ._dirs import DirectoryError
from ._files import FileInfo
from .carrier import MAX_PAYLOAD, result_frame, write_result
from .client import Client, Listener, Session, serve
from .errors import (
    BadJSONError,
    BadRequestError,
    BusyError,
    ConnectionLostError,
    IgnoredFieldsWarning,
    LineTooLongError,
    NotFoundError,
    FailedError,
    ProtocolError,
    RelaydError,
    ReplyTimeoutError,
    ResultCarrierError,
    ShuttingDownError,
    UnauthenticatedError,
    UnexpectedReplyError,
    UnknownKindError,
)
from .results import (
    DESTROYED,
    EXITED,
    FAILED,
    FRAMEWORK_TIMEOUT,
    NONE,
    SETTLED,
    Diagnostic,
    Executed,
    ExecutionUsage,
    Output,
    ExecutionStatus,
    Ready,
    Status,
    Survivor,
    Usage,
    Verified,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncListener", "AsyncSession", "Client", "Listener", "Session", "serve",
    "write_result", "result_frame", "MAX_PAYLOAD",
    "FileInfo",
    "Ready", "Executed", "Verified", "Status", "ExecutionStatus", "Survivor", "Diagnostic", "Output",
    "Usage", "ExecutionUsage",
    "EXITED", "FRAMEWORK_TIMEOUT", "NONE", "SETTLED", "DESTROYED", "FAILED",
    "RelaydError", "ProtocolError", "BadJSONError", "LineTooLongError", "UnauthenticatedError",
    "BadRequestError", "UnknownKindError", "BusyError", "ShuttingDownError", "NotFoundError", "FailedError", "DirectoryError",
    "ConnectionLostError", "ReplyTimeoutError", "UnexpectedReplyError", "ResultCarrierError",
    "IgnoredFieldsWarning",
]
