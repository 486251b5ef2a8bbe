"""HTTP routers, one module per resource; ``services.api.app`` includes them."""
