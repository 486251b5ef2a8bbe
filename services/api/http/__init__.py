"""What every request goes through.

* ``edge``: ``Edge``, the one ASGI layer every request passes first
* ``one_write``: uvicorn's HTTP/1.1 protocol, sending a response's writes as one
* ``auth``: bearer-token authentication (JWT)
* ``jwks``: the gateway's public keys, from a URL or a file
* ``problems``: errors as problem+json with stable type URIs
* ``request_context``: request ids, and reading headers from an ASGI scope
* ``logs``: structured JSON logs with the request id
* ``metrics``: request counts and latency by route and status
* ``readiness``: the named checks of ``GET /readyz``
* ``deps``: dependencies on what the lifespan put in ``app.state``
* ``models``: request and response bodies
"""
