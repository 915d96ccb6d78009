"""A NATS publisher for `bench/run.py msg` (nats-py): N messages to
SUBJECT one at a time, each flushed (its PING answered by the server's
PONG) before the next, as a producer that waits for its broker does.
Even messages carry a `traceparent` header (HPUB), odd ones none (PUB);
payload 16 bytes.

Usage: msg_client.py nats PORT SUBJECT N
"""
import asyncio
import sys

import nats

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def publish(port, subject, n):
    nc = await nats.connect("nats://127.0.0.1:%d" % port, name="rt-bench", allow_reconnect=False)
    for i in range(n):
        payload = b"bench-payload-%02d" % (i % 100)
        await nc.publish(subject, payload, headers={"traceparent": TRACEPARENT} if i % 2 == 0 else None)
        await nc.flush()
    await nc.close()


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "nats":
        sys.exit("usage: msg_client.py nats PORT SUBJECT N")
    asyncio.run(publish(int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
