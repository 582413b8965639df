"""The Python client of `dpsql serve`: `dpsql.connect(url, token=...)` answers with the same
result objects and raises the same errors as the local API."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import errors
from ..accuracy import AccuracyPlan
from ..result import AggregateInfo, BudgetStatus, Explanation, HistoryEntry, QueryResult
from ..workload_result import WorkloadExplanation, WorkloadResult

if TYPE_CHECKING:
    import httpx

ANSWER_ID = "Dpsql-Answer-Id"


@dataclass(frozen=True)
class ServiceBudget:
    """What the service says is left for you: the global budget (the guarantee), your own cap
    if the owner set one, and the largest epsilon both still admit."""

    analyst: str
    role: str
    largest_epsilon: float
    total: BudgetStatus
    cap: BudgetStatus | None


class Client:
    """A connection to a dpsql service, identified by a token (never by a name)."""

    def __init__(self, url: str, token: str, timeout: float = 120.0,
                 verify: bool | str | ssl.SSLContext = True) -> None:
        """`verify`: check the server's certificate (True), against this CA file (a path, e.g. the
        owner's self-signed certificate), or with this SSL context."""
        if not url.startswith(("http://", "https://")):
            raise errors.InputError(f"server URL must start with http:// or https://, got {url!r}")
        if isinstance(verify, str):
            try:
                verify = ssl.create_default_context(cafile=verify)
            except (OSError, ssl.SSLError) as exc:
                raise errors.InputError(f"cannot read the certificate file {verify}: {exc}") from None
        import httpx  # here, not at the top: `import dpsql` and local queries never need it

        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, verify=verify,
                                  headers={"Authorization": f"Bearer {token}"})

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def query(self, sql: str, epsilon: float | None = None, mode: str | None = None,
              cost: float | None = None, accuracy: float | None = None,
              reuse: bool | None = None) -> QueryResult:
        """A private answer, charged to this token's analyst (`accuracy=H`: at the smallest
        epsilon keeping every noisy cell's 95% half-width within ±H), or derived at no charge
        from answers released to you (`reuse=False`: charged, with fresh noise; None: the
        service's setting, on unless its owner turned it off)."""
        response = self._send("POST", "/v1/query", _ask(sql=sql, epsilon=epsilon, mode=mode,
                                                        cost=cost, accuracy=accuracy, reuse=reuse))
        ident = response.headers.get(ANSWER_ID)  # none for an answer derived at no charge
        return QueryResult.from_dict(response.json(), None if ident is None else int(ident))

    def explain(self, sql: str, epsilon: float | None = None, mode: str | None = None,
                cost: float | None = None, accuracy: float | None = None,
                reuse: bool | None = None) -> Explanation:
        """The plan, noise and cost (0 when derived from your released answers); spends
        nothing."""
        d = self._send("POST", "/v1/explain", _ask(sql=sql, epsilon=epsilon, mode=mode, cost=cost,
                                                   accuracy=accuracy, reuse=reuse)).json()
        return Explanation(**{**d, "group_by": tuple(d["group_by"]),
                              "aggregates": tuple(AggregateInfo(**a) for a in d["aggregates"]),
                              "budget": BudgetStatus(**d["budget"])})

    def query_many(self, statements: list[str], epsilon: float | None = None,
                   mode: str | None = None, cost: float | None = None,
                   accuracy: float | None = None) -> WorkloadResult:
        """Statements answered together at one epsilon (or cost, or accuracy) for the whole
        set, charged once to this token's analyst."""
        response = self._send("POST", "/v1/workload", _ask(
            statements=list(statements), epsilon=epsilon, mode=mode, cost=cost, accuracy=accuracy))
        return WorkloadResult.from_dict(response.json(), int(response.headers[ANSWER_ID]))

    def explain_many(self, statements: list[str], epsilon: float | None = None,
                     mode: str | None = None, cost: float | None = None,
                     accuracy: float | None = None) -> WorkloadExplanation:
        """A workload's strategy, each statement's expected error and the cost; spends nothing."""
        d = self._send("POST", "/v1/workload/explain", _ask(
            statements=list(statements), epsilon=epsilon, mode=mode, cost=cost,
            accuracy=accuracy)).json()
        return WorkloadExplanation.from_dict(d)

    def epsilon_for(self, sql: str | list[str], ci95: float,
                    mode: str | None = None) -> AccuracyPlan:
        """The smallest epsilon whose 95% half-width on every noisy cell of `sql` (a query, or
        a list of statements asked as one workload) is at most `ci95`; spends nothing."""
        asked = {"sql": sql} if isinstance(sql, str) else {"statements": list(sql)}
        return AccuracyPlan(**self._send("POST", "/v1/epsilon",
                                         _ask(**asked, ci95=ci95, mode=mode)).json())

    def budget(self) -> ServiceBudget:
        d = self._send("GET", "/v1/budget").json()
        return ServiceBudget(analyst=d["analyst"], role=d["role"], largest_epsilon=d["largest_epsilon"],
                             total=BudgetStatus(**d["global"]),
                             cap=None if d["cap"] is None else BudgetStatus(**d["cap"]))

    def schema(self) -> dict:
        """The public policy: tables, columns, bounds, domains and the SQL accepted."""
        return self._send("GET", "/v1/schema").json()

    def history(self, id: int | None = None, analyst: str | None = None) -> tuple[HistoryEntry, ...]:
        """Your released answers as stored (an accountant may name another analyst)."""
        params = {k: v for k, v in (("id", id), ("analyst", analyst)) if v is not None}
        return tuple(HistoryEntry(**e) for e in self._send("GET", "/v1/history", params=params).json())

    def report(self) -> dict:
        """The full budget report as `dpsql report --format json` prints it (accountant)."""
        return self._send("GET", "/v1/report").json()

    def _send(self, method: str, path: str, body: dict | None = None,
              params: dict | None = None) -> httpx.Response:
        import httpx

        try:
            response = self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise errors.InputError(f"cannot reach the dpsql service at {self._http.base_url}: "
                                    f"{exc}") from None
        if response.is_success:
            return response
        raise _error(response)


def connect(url: str, token: str, **options) -> Client:
    """Connect to a `dpsql serve` at `url` with the token the data owner gave you."""
    return Client(url, token, **options)


@dataclass(frozen=True)
class Service:
    """`dpsql query --server URL --token T`: the service asked, the token and the local data
    options written beside them (a mistake, refused when the client is made)."""

    url: str
    token: str | None
    written: list[str]

    def client(self) -> Client:
        """A client of the service, or a one-line refusal of local options or a missing token."""
        if self.written:
            raise errors.InputError(f"--server asks a service, which holds the data and the "
                                    f"ledger: drop {', '.join(self.written)} (give only --token)")
        if not self.token:
            raise errors.InputError("--server needs your token: --token TOKEN or the environment "
                                    "variable DPSQL_TOKEN")
        return connect(self.url, self.token)


def _ask(**fields: object) -> dict:
    """A request body: the fields given (None: not asked)."""
    return {k: v for k, v in fields.items() if v is not None}


def _error(response: httpx.Response) -> errors.DpsqlError:
    """The local API's error for a refusal the service sent (its message and numbers)."""
    try:
        body = response.json()
        message, kind = str(body["error"]), str(body.get("type", ""))
    except (ValueError, KeyError, TypeError):
        return errors.DpsqlError(f"the dpsql service answered HTTP {response.status_code} without "
                                 "a dpsql error")
    numbers = {k: v for k, v in body.items() if k not in ("error", "type")}
    if kind == "BudgetExhausted":
        return errors.BudgetExhausted(message, asked=numbers.get("asked", 0.0),
                                      cost=numbers.get("cost", 0.0),
                                      largest_epsilon=numbers.get("largest_epsilon", 0.0))
    if kind == "EngineHalted":
        return errors.EngineHalted()
    if kind == "QueryTooLarge":
        return errors.QueryTooLarge(message, noisy_values=numbers.get("noisy_values", 0),
                                    limit=numbers.get("limit", 0))
    if kind == "ResourceLimitExceeded":
        return errors.ResourceLimitExceeded(message, limit=str(numbers.get("limit", "")),
                                            value=numbers.get("value", 0.0))
    simple = {"QueryRefused": errors.QueryRefused,
              "InputError": errors.InputError, "PolicyError": errors.PolicyError,
              "LedgerError": errors.LedgerError, "AccessDenied": errors.AccessDenied,
              "WrongRole": errors.AccessDenied}
    return simple.get(kind, errors.DpsqlError)(message, status=response.status_code, **{
        k: v for k, v in numbers.items() if k != "status"})
