"""The router interface: the only way the operator moves traffic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.types import NO_HEADER_ROUTES, HeaderRoute, RouteAcceptance


class RouteError(Exception):
    """The route cannot be read or written; the message says which object and how to fix it."""


class RouteMissing(RouteError):
    """A user-owned route named by ``httpRouteRef`` does not exist."""


class RouteDrift(RouteError):
    """After a write, the API server holds other weights than the ones written."""


@dataclass(frozen=True)
class RouteState:
    """The route as read once: its weights by revision and what the gateway says of it."""

    weights: dict[str, int]
    acceptance: RouteAcceptance
    #: The header routes it holds beside the split (traffic/header_routes.py).
    header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES


class TrafficRouter(Protocol):
    async def observe(self) -> RouteState | None:
        """The route's weights and the gateway's acceptance of its current generation (one
        read); None when the route does not exist yet.  Setting a weight never waits for the
        gateway: the core decides what a pending or rejected route means."""

    async def get_weights(self) -> dict[str, int] | None:
        """Backend weights by revision as the API server holds them; None when the route does
        not exist yet (an owned route before its first write)."""

    async def set_weights(self, stable: str, canary: str | None, canary_weight: int,
                          header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES) -> None:
        """Write ``canary_weight`` to the canary and the rest to stable, and exactly the
        ``header_routes`` asked for, in ONE write, then verify the API server holds exactly that
        (raise :class:`RouteDrift` otherwise)."""
