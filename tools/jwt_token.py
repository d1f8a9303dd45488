"""Print a development bearer token: `make token SUB=7 ACCOUNTS=1,2`.

Signed with JWT_SECRET (the local development default from deploy/local/stack.env).
"""

from __future__ import annotations

import argparse
import os
import time

import jwt


def mint(secret: str, sub: int, accounts: list[int], ttl_seconds: int) -> str:
    now = int(time.time())
    claims = {"sub": str(sub), "accounts": accounts, "iat": now, "exp": now + ttl_seconds}
    return jwt.encode(claims, secret, algorithm="HS256")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sub", type=int, default=7, help="the user id (default 7)")
    parser.add_argument("--accounts", default="1", help="Zalo account ids granted (default 1)")
    parser.add_argument("--ttl", type=int, default=86_400, help="seconds valid (default 1 day)")
    args = parser.parse_args()
    accounts = [int(a) for a in args.accounts.split(",") if a.strip()]
    print(mint(os.environ["JWT_SECRET"], args.sub, accounts, args.ttl))


if __name__ == "__main__":
    main()
