"""How many password guesses the console's login takes: per client and overall.

Every login attempt takes a slot when it arrives (before the password is checked and before the
failed-login delay), so 150 parallel requests cannot all pass the check before the first one
fails. A client (an IPv4 address, or an IPv6 /64, what one host usually holds) gets
``per_client`` attempts in any ``window`` seconds; all clients together get ``overall``, so
many addresses guessing in parallel are bounded too. Past either, the login answers 429 with
Retry-After until the oldest attempt ages out; the right password is refused as well meanwhile
(otherwise the lockout would only delay a guess, not prevent it). A successful login frees the
client's slots. The state is a few in-memory lists changed without an await in between: no
lock, nothing that blocks the event loop, at most ``overall`` entries whatever the traffic.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable

PER_CLIENT = 5  # attempts per client in a window
OVERALL = 30  # attempts of all clients together in a window
WINDOW = 60.0  # seconds


def client_key(host: str | None) -> str:
    if not host:
        return "?"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class LoginLimiter:
    def __init__(self, per_client: int = PER_CLIENT, overall: int = OVERALL, window: float = WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_client, self.overall, self.window, self.clock = per_client, overall, window, clock
        self.attempts: list[tuple[float, str]] = []  # (when, client), oldest first, all clients

    def _prune(self, now: float) -> None:
        horizon = now - self.window
        keep = 0
        while keep < len(self.attempts) and self.attempts[keep][0] <= horizon:
            keep += 1
        del self.attempts[:keep]

    def admit(self, client: str) -> tuple[int, str] | None:
        """Take a slot for one attempt, or say how many seconds to wait and whose limit it is
        ("client" or "overall")."""
        now = self.clock()
        self._prune(now)
        mine = [when for when, who in self.attempts if who == client]
        if len(mine) >= self.per_client:
            return max(1, math.ceil(mine[0] + self.window - now)), "client"
        if len(self.attempts) >= self.overall:
            return max(1, math.ceil(self.attempts[0][0] + self.window - now)), "overall"
        self.attempts.append((now, client))
        return None

    def succeeded(self, client: str) -> None:
        self.attempts = [entry for entry in self.attempts if entry[1] != client]
