"""Who holds a claim: a process named by host, pid and start time, and whether it still runs."""

from __future__ import annotations

import os
import socket

CLAIM_TTL_S = 900.0  # a claim not renewed for this long may be taken over (a crash on another host)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), None where it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: fields after the last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def process_owner() -> str:
    """``host:pid:start`` of this process: unique across hosts sharing a file system and across pid
    reuse on one host."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def owner_alive(owner: str) -> bool:
    """False only when ``owner`` is a process of this host that has ended (its pid is gone or now
    names a process started at another time); owners on other hosts count as alive until their
    claims expire."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    now = _start_time(int(pid_text))
    if now is None:
        return False
    return start in ("?", now)
