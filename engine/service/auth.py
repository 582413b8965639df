"""Analysts' tokens: made with `secrets`, stored only as an HMAC under the ledger's own key, and
checked against every stored hash in constant time, so a failure says nothing about any token."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from ..accounting.analysts import ROLES, Analyst
from ..accounting.ledger import Ledger
from ..errors import AccessDenied, InputError

TOKEN_BYTES = 32  # 256 bits of randomness: brute force is hopeless, rate limits only cap load
MAX_TOKEN_LENGTH = 200  # longer header values are refused before hashing


def new_analyst(ledger: Ledger, name: str, role: str = "analyst",
                cap: float | None = None) -> tuple[Analyst, str]:
    """Register an analyst and return them with their new token (shown once, never stored)."""
    name = check_name(name)
    if role not in ROLES:
        raise InputError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    cap = check_cap(cap)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return ledger.add_analyst(name, token_hash(ledger.token_key(), token), role, cap), token


def identify(ledger: Ledger, authorization: str | None) -> Analyst:
    """The analyst an `Authorization: Bearer TOKEN` header belongs to; AccessDenied otherwise.

    The token's hash is compared with every active analyst's hash by `hmac.compare_digest`,
    without stopping at a match, so the time taken does not depend on which hash matched or
    how much of it did; the message never repeats the token."""
    token = _bearer(authorization)
    presented = token_hash(ledger.token_key(), token)
    found = None
    for name, stored in ledger.credentials():
        if hmac.compare_digest(presented, stored):
            found = name
    if found is None:
        raise AccessDenied("the token is wrong or was revoked; ask the data owner for a token "
                           "(dpsql analyst add)")
    account = ledger.account(found)
    if account is None or account.analyst.revoked is not None:
        raise AccessDenied("the token is wrong or was revoked; ask the data owner for a token "
                           "(dpsql analyst add)")
    return account.analyst


def token_hash(key: bytes, token: str) -> str:
    """HMAC-SHA256 of a token under the ledger's key, as hex."""
    return hmac.new(key, token.encode("utf-8", "replace"), hashlib.sha256).hexdigest()


def check_name(name: str) -> str:
    """An analyst's name: printable, 1 to 100 characters, as the ledger records names."""
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or not name.isprintable():
        raise InputError(f"analyst name must be printable text of 1 to 100 characters, got {name!r}")
    return name.strip()


def check_cap(cap: float | None) -> float | None:
    """A cap is a finite epsilon > 0 (None: no cap of their own)."""
    if cap is not None and not (isinstance(cap, int | float) and 0 < cap < 1e300):
        raise InputError(f"cap must be a finite epsilon > 0, got {cap!r}")
    return None if cap is None else float(cap)


def _bearer(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer TOKEN` header."""
    if not authorization:
        raise AccessDenied("missing token: send the header Authorization: Bearer TOKEN")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_LENGTH:
        raise AccessDenied("malformed Authorization header: expected Bearer TOKEN")
    return token
