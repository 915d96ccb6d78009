"""Batched and compressed Produce requests of librdkafka (confluent-kafka)
and aiokafka: four records lingered into one batch, plain then compressed.

Usage: kafka_batches.py confluent CODEC | aiokafka CODEC (against the proxy on 39093)
"""
import asyncio
import sys

B = "127.0.0.1:39093"
TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HEADERS = [("traceparent", TP), ("secret-hdr", b"secret-hval")]


def confluent(codec):
    from confluent_kafka import Producer

    for c in ("none", codec):
        p = Producer({"bootstrap.servers": B, "client.id": "rt-batch-" + c, "linger.ms": 200, "compression.type": c})
        for i in range(4):
            p.produce("orders", key=b"secret-key", value=b"secret-payload-%d" % i, headers=HEADERS)
        assert p.flush(10) == 0


async def aiokafka(codec):
    from aiokafka import AIOKafkaProducer

    for c in (None, codec):
        p = AIOKafkaProducer(bootstrap_servers=B, client_id="rt-batch-%s" % (c or "none"), linger_ms=200, compression_type=c)
        await p.start()
        fs = [await p.send("orders", key=b"secret-key", value=b"secret-payload-%d" % i, headers=HEADERS) for i in range(4)]
        for f in fs:
            await f
        await p.stop()


if sys.argv[1] == "confluent":
    confluent(sys.argv[2])
else:
    asyncio.run(aiokafka(sys.argv[2]))
