"""The subject's side of the result carrier (protocol section 5): an agent
wrapper run by relayd with a resultToken hands back its result in one call,
write_result(payload), which writes the frame line

    MAKA-EVAL-RESULT-V1 <resultToken> <length> <sha256> <payload>

to stdout, with the token from MAKA_EVAL_RESULT_TOKEN."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
from typing import Any, Mapping, Optional, TextIO, Union

from .errors import ResultCarrierError

__all__ = ["write_result", "result_frame", "MAX_PAYLOAD"]

#: The longest payload a frame may carry, in bytes (after UTF-8 encoding).
MAX_PAYLOAD = 2048
_TOKEN = re.compile(r"[0-9a-f]{32}")

Payload = Union[str, bytes, Mapping[str, Any]]


def result_frame(payload: Payload, token: str) -> str:
    """The frame line (ending in a newline) for ``payload``: a str, UTF-8
    bytes, or a mapping written as compact JSON."""
    if not _TOKEN.fullmatch(token):
        raise ResultCarrierError("the result token must be 32 lower-case hex digits (MAKA_EVAL_RESULT_TOKEN)")
    if isinstance(payload, Mapping):
        payload = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultCarrierError("the result payload is not UTF-8") from None
    if len(data) > MAX_PAYLOAD:
        raise ResultCarrierError(f"the result payload is {len(data)} bytes; a frame carries at most {MAX_PAYLOAD}")
    digest = hashlib.sha256(data).hexdigest()
    encoded = base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")
    return f"MAKA-EVAL-RESULT-V1 {token} {len(data)} {digest} {encoded}\n"


def write_result(payload: Payload, *, token: Optional[str] = None, out: Optional[TextIO] = None) -> None:
    """Write the result frame for ``payload`` to stdout (or ``out``), with
    the token relayd gave this process in MAKA_EVAL_RESULT_TOKEN (or
    ``token``). Anything else the process writes to stdout is kept apart
    by relayd (diagnostic ``unstructured-output``), but the frame must be
    the only one: call this once. Raises ResultCarrierError without a
    token or with a payload a frame cannot carry; writes nothing then."""
    if token is None:
        token = os.environ.get("MAKA_EVAL_RESULT_TOKEN")
        if not token:
            raise ResultCarrierError("MAKA_EVAL_RESULT_TOKEN is not set: this process was not started by relayd with a resultToken")
    line = result_frame(payload, token)
    stream = sys.stdout if out is None else out
    # A frame line must start a line: end whatever the process left unfinished.
    stream.flush()
    stream.write(line)
    stream.flush()
