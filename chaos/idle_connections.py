"""Connections that never send a byte, from a process of their own (chaos scenario 10).

A process may hold only as many sockets as its open-file limit allows (20,000 on the
machine these scenarios were written on, and root may not raise it there), so the
scenario's 20,000 idle connections come from several of these::

    python -m chaos.idle_connections --port P --count N

It opens up to N connections to 127.0.0.1:P (a connect that does not complete within
30 s counts as refused), prints ``{"opened": n}`` once done, holds them until SIGTERM,
then prints ``{"closed_by_server": m}``: how many the server had closed by then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import socket


def raise_own_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def hold(port: int, count: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    limit = raise_own_fd_limit()
    count = min(count, limit - 100)
    sockets: list[socket.socket] = []
    gate = asyncio.Semaphore(500)  # connects in flight: a burst, not a single SYN flood

    async def one() -> None:
        async with gate:
            if stop.is_set():
                return
            sock = socket.socket()
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 30)
            except (OSError, TimeoutError):
                sock.close()
                return
            sockets.append(sock)

    await asyncio.gather(*(one() for _ in range(count)))
    print(json.dumps({"opened": len(sockets)}), flush=True)
    await stop.wait()
    closed = sum(1 for s in sockets if closed_by_peer(s))
    print(json.dumps({"closed_by_server": closed}), flush=True)
    for sock in sockets:
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(hold(args.port, args.count))


if __name__ == "__main__":
    main()
