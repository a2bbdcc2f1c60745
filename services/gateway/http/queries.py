"""Query strings checked whole: a parameter a route does not take, or one it takes once given
twice, is refused rather than ignored.

FastAPI reads the parameters a route declares and drops the rest, and keeps the last of a
repeated one; a misspelt filter (`?status=FAILED` for `state`) would then list every job as
if it had been applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from mediamesh.common.errors import InvalidArgument

# Names of unknown parameters an error lists, and characters of each: the rest is the
# caller's own text, which an error need not echo at length.
_LISTED = 5
_NAME_CHARS = 32


@dataclass(frozen=True)
class QueryParameters:
    """The query parameters a route takes: `repeatable` ones take several values (filters),
    `once` ones a single value."""

    repeatable: tuple[str, ...] = ()
    once: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return sorted((*self.repeatable, *self.once))


def check_query(request: Request, taken: QueryParameters) -> None:
    """InvalidArgument naming the parameters the route does not take, and the ones it does;
    or naming a single-valued parameter given more than once."""
    query = request.query_params
    unknown = sorted(set(query) - set(taken.names))
    if unknown:
        names = ", ".join(name[:_NAME_CHARS] for name in unknown[:_LISTED])
        kind = "a query parameter" if len(unknown) == 1 else "query parameters"
        raise InvalidArgument(
            f"{names}: not {kind} of {request.url.path}; it takes {', '.join(taken.names)}"
        )
    for name in taken.once:
        given = len(query.getlist(name))
        if given > 1:
            raise InvalidArgument(f"{name}: given {given} times; give it once")
