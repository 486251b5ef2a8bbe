"""Code every service shares and that knows none of them: pure rules (`domain/`), what
the parts agree on (`contracts/`), store access (`stores/`), the worker runtime
(`worker/`), settings and the secret policy."""
