"""Where numbers come from: a :class:`MetricSource` answers one instant PromQL query with a number.

Anything else is a typed error whose ``kind`` is the :class:`MeasurementError` the analysis
reports, so the decision layer sees exactly three outcomes (value, inconclusive, error) and never
an exception type from an HTTP library.

The operator is asyncio (kopf), so :class:`PrometheusSource` uses ``httpx.AsyncClient``; see
docs/metrics.md for why ``prometheus-api-client`` is not used here.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any, Protocol

import httpx

from ..api.spec import PrometheusSpec
from ..bounded_http import AnswerTooLarge, MalformedJSON, MiB, loads, read_capped, sanitize
from ..core.types import MeasurementError


class MetricQueryError(Exception):
    """A query that gave no usable number; ``kind`` says which of the analysis outcomes it is."""

    kind: MeasurementError

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NoData(MetricQueryError):
    """Empty result, or NaN (``histogram_quantile`` or a ratio over a window without traffic)."""

    kind = MeasurementError.NO_DATA


class Unreachable(MetricQueryError):
    """Prometheus did not answer usefully: refused, timed out, 5xx, auth or routing error."""

    kind = MeasurementError.UNREACHABLE


class BadQuery(MetricQueryError):
    """Prometheus rejected the PromQL, or its result cannot be one number: a spec error."""

    kind = MeasurementError.BAD_QUERY


class MetricSource(Protocol):
    async def query(self, promql: str, at: float | None = None) -> float:
        """The single value of ``promql`` evaluated at unix time ``at`` (default: now).

        Raises :class:`NoData`, :class:`Unreachable` or :class:`BadQuery`.
        """
        ...

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        """Every series of ``promql`` as ``{value of label: number}`` (NaN kept as NaN).

        Raises :class:`NoData` for an empty vector, :class:`BadQuery` when a series lacks
        ``label`` or the result is not a vector, :class:`Unreachable` as :meth:`query`.
        """
        ...


#: The byte cap of one answer; a single-number answer is a few hundred bytes.
MAX_ANSWER_BYTES = 4 * MiB

#: RFC 6750's b64token: what a bearer token may hold.  Anything else (a newline, a non-ASCII
#: character) fails in the HTTP client with the header's value -- the token -- in its message.
BEARER_TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")

# Prometheus API error types that mean "your query is wrong" rather than "try again later".
_QUERY_ERROR_TYPES = frozenset({"bad_data", "execution"})


class PrometheusSource:
    """Instant queries against the Prometheus HTTP API (``POST /api/v1/query``).

    POST keeps long template queries out of URLs (proxies cap URL length).  ``timeout_s`` bounds
    the whole request on our side -- connecting, sending and reading the body, so a server that
    trickles bytes fails at the timeout, not per read -- and is also sent as the query's
    ``timeout`` so Prometheus stops evaluating a query nobody waits for.  The body is read up to
    ``max_answer_bytes`` (a single-number answer is a few hundred bytes; a query returning many
    series is an error anyway).  ``max_concurrency`` caps parallel queries, because one analysis
    fans out into several queries per metric.
    """

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 5.0,
        bearer_token: str | None = None,
        client: httpx.AsyncClient | None = None,
        max_concurrency: int = 8,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = address.rstrip("/") + "/api/v1/query"
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self._headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else {}
        self._client = client or httpx.AsyncClient()
        self._owns_client = client is None
        self._slots = asyncio.Semaphore(max_concurrency)

    @classmethod
    def from_spec(cls, spec: PrometheusSpec, bearer_token: str | None = None) -> PrometheusSource:
        """Build from ``spec.analysis.prometheus``; the caller reads the token Secret, if any."""
        return cls(spec.address, timeout_s=spec.timeout_seconds, bearer_token=bearer_token)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def query(self, promql: str, at: float | None = None) -> float:
        return _single_value(await self._data(promql, at))

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        return _by_label(await self._data(promql, at), label)

    async def _data(self, promql: str, at: float | None) -> dict[str, Any]:
        form = {"query": promql, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            form["time"] = f"{at:.3f}"
        where = sanitize(self.url)
        async with self._slots:
            try:
                async with asyncio.timeout(self.timeout_s):
                    async with self._client.stream(
                        "POST", self.url, data=form, headers=self._headers, timeout=self.timeout_s
                    ) as resp:
                        data = await read_capped(resp, self.max_answer_bytes)
            except (TimeoutError, httpx.TimeoutException):
                raise Unreachable(
                    f"Prometheus at {where} did not answer within {self.timeout_s:g}s"
                ) from None
            except AnswerTooLarge as e:
                raise BadQuery(
                    f"Prometheus at {where}: {e} (a query for one number answers in a few "
                    "hundred bytes; aggregate it, e.g. sum(...))"
                ) from None
            except httpx.LocalProtocolError as e:  # its text may quote a header: the token
                raise Unreachable(f"Prometheus at {where}: {type(e).__name__}") from None
            except (httpx.HTTPError, httpx.InvalidURL) as e:
                raise Unreachable(
                    f"Prometheus at {where}: {type(e).__name__}: {sanitize(e)}"
                ) from None
        return _parse(resp.status_code, where, data)


def _parse(status_code: int, where: str, data: bytes) -> dict[str, Any]:
    """The ``data`` object of a successful answer; typed errors for everything else."""
    try:
        body: Any = loads(data)
    except MalformedJSON:
        body = None
    if not isinstance(body, dict) or "status" not in body:
        # An HTML error page from an ingress or a wrong address: not a Prometheus answer.
        raise Unreachable(f"HTTP {status_code} from {where} is not a Prometheus API response")
    if body["status"] != "success":
        etype, error = sanitize(body.get("errorType", "")), sanitize(body.get("error", ""))
        if etype in _QUERY_ERROR_TYPES or status_code in (400, 422):
            raise BadQuery(f"Prometheus rejected the query ({etype}): {error}")
        raise Unreachable(f"Prometheus error HTTP {status_code} ({etype}): {error}")
    data_field = body.get("data")
    if not isinstance(data_field, dict):
        raise _malformed("data is not an object")
    return data_field


def _malformed(why: str) -> Unreachable:
    return Unreachable(f"malformed Prometheus answer: {why}")


def _single_value(data: dict[str, Any]) -> float:
    rtype = data.get("resultType")
    result: Any = data.get("result")
    if rtype == "scalar":
        return _number(_sample_value(result))
    if rtype != "vector":
        raise BadQuery(
            f"query returned a {sanitize(rtype, 40)}; it must return an instant vector or scalar "
            "(wrap a range selector in rate(), increase() or *_over_time())"
        )
    if not isinstance(result, list):
        raise _malformed("a vector result is not a list")
    if not result:
        raise NoData("query returned an empty vector (no matching series)")
    if not all(isinstance(s, dict) for s in result):
        raise _malformed("a series is not an object")
    if len(result) > 1:
        shown = ", ".join(_labels(s.get("metric")) for s in result[:3])
        raise BadQuery(
            f"query returned {len(result)} series ({shown}{', …' if len(result) > 3 else ''}); "
            "it must aggregate to one series, e.g. wrap it in sum(...) or max(...)"
        )
    if "value" not in result[0]:
        raise BadQuery("query returned a native histogram sample; reduce it to a number first")
    return _number(_sample_value(result[0]["value"]))


def _by_label(data: dict[str, Any], label: str) -> dict[str, float]:
    result: Any = data.get("result")
    if data.get("resultType") != "vector":
        raise BadQuery(f"query returned a {sanitize(data.get('resultType'), 40)}; expected a "
                       f"vector by {label}")
    if not isinstance(result, list):
        raise _malformed("a vector result is not a list")
    if not result:
        raise NoData("query returned an empty vector (no matching series)")
    out: dict[str, float] = {}
    for series in result:
        if not isinstance(series, dict):
            raise _malformed("a series is not an object")
        metric = series.get("metric") or {}
        key = metric.get(label) if isinstance(metric, dict) else None
        if not isinstance(key, str) or "value" not in series:
            raise BadQuery(f"a series without the label {label!r}: {_labels(metric)}")
        out[key] = _float(_sample_value(series["value"]))
    return out


def _sample_value(sample: Any) -> str:
    """The value of a ``[<unix time>, "<value>"]`` pair (Prometheus writes values as strings)."""
    if not (isinstance(sample, list) and len(sample) == 2 and isinstance(sample[1], str)):
        raise _malformed("a sample is not [time, \"value\"]")
    return sample[1]


def _float(text: str) -> float:
    try:
        return float(text)  # Prometheus writes "NaN", "+Inf", "-Inf", which float() accepts
    except ValueError:
        raise _malformed(f"sample value {sanitize(text, 40)!r} is not a number") from None


def _number(text: str) -> float:
    value = _float(text)
    if math.isnan(value):
        raise NoData("query returned NaN (no traffic in the window: 0/0 or an empty histogram)")
    return value


def _labels(metric: Any) -> str:
    if not isinstance(metric, dict):
        return "{}"
    text = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items(), key=str))
    return "{" + sanitize(text, 120) + "}"
