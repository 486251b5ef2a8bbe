"""Gateway-token signers for the JWKS tests: a private key, its public JWK, and tokens."""
from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm


class Signer:
    """A private key (RS256 or ES256) and its public JWK; tokens carry ``issuer`` and
    ``audience`` unless a claim set to None drops them."""

    def __init__(self, kid: str, alg: str, *, issuer: str, audience: str) -> None:
        self.kid, self.alg = kid, alg
        self.issuer, self.audience = issuer, audience
        if alg == "RS256":
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            jwk = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            jwk = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.jwk = {**jwk, "kid": kid, "alg": alg, "use": "sig"}

    def token(self, user_id: int = 42, *, ttl: int = 600, kid: str | None = None,
              alg: str | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": str(user_id), "iat": now, "exp": now + ttl, "iss": self.issuer,
                "aud": self.audience, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.private, algorithm=alg or self.alg,
                          headers={"kid": kid or self.kid})

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
