"""Credentials never leave in what the run writes: a tracking URI such as
``https://user:token@host`` is logged, saved and printed as ``https://***@host``.

MLflow's own ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` keep credentials out
of the URI altogether; a resumed run whose saved config holds a redacted URI needs the URI
(or those variables) again.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HIDDEN = "***"
# Query parameters that carry a secret (``?token=...``, ``?api_key=...``).
SECRET_PARAM = re.compile(r"token|secret|password|passwd|pwd|key|auth|signature", re.IGNORECASE)


def redact_uri(uri: str | None) -> str | None:
    """``uri`` with its user info and secret query values replaced by ``***``."""
    if not uri or "://" not in uri:
        return uri
    parts = urlsplit(uri)
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rpartition('@')[2]}"
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, HIDDEN if SECRET_PARAM.search(k) else v) for k, v in pairs])
    if (netloc, query) == (parts.netloc, parts.query):
        return uri  # nothing to hide; rebuilding would also drop sqlite:////'s empty host
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def public_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config dict as it may be written or logged: its tracking URI redacted."""
    public = copy.deepcopy(dict(config))
    tracking = public.get("tracking")
    if isinstance(tracking, dict) and tracking.get("uri"):
        tracking["uri"] = redact_uri(tracking["uri"])
    return public


def redact_text(text: str, uri: str | None) -> str:
    """``text`` (an error message that may quote ``uri``) with ``uri``'s secrets hidden."""
    if not uri or "://" not in uri:
        return text
    parts = urlsplit(uri)
    if "@" in parts.netloc:
        text = text.replace(parts.netloc.rpartition("@")[0] + "@", f"{HIDDEN}@")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if value and SECRET_PARAM.search(key):
            text = text.replace(value, HIDDEN)
    return text
