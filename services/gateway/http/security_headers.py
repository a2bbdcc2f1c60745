"""Headers every HTTP answer carries, whatever made it: JSON, result bytes, errors, /docs,
CORS preflights.

`X-Content-Type-Options: nosniff`: a browser takes each answer for the type it names, so a
result or an error message that happens to look like HTML or script is never run as one.
Framing is refused (`X-Frame-Options: DENY`, and `frame-ancestors 'none'` for browsers that
read only the policy), so no other site can show the page or /docs under a decoy and have
clicks land on them. An answer that sets its own policy (the web page's) keeps it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
}


class SecurityHeaders:
    """ASGI middleware: adds HEADERS to each answer that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
