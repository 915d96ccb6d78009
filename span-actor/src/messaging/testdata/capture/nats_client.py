"""nats-py against nats-server through the recording proxy: one connection
per conversation (argv[1]): publish, subscribe, request, verbose."""
import sys, asyncio, nats
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
URL = "nats://127.0.0.1:34224"

async def main(what):
    opts = dict(servers=[URL], user="secret-user", password="hunter2", name="rt-" + what)
    if what == "verbose":
        opts["verbose"] = True
        opts["pedantic"] = True
    if what == "publish":
        nc = await nats.connect(**opts)
        await nc.publish("orders.created", b"secret-payload-1")
        await nc.publish("orders.created", b"secret-payload-2", headers={"traceparent": TP, "secret-hdr": "secret-hval"})
        await nc.publish("orders.created", b"secret-payload-3", reply="secret-reply.inbox")
        await nc.flush()
        await nc.close()
    elif what == "subscribe":
        nc = await nats.connect(**opts)
        got = []
        async def cb(m):
            got.append((m.subject, m.headers))
        sub = await nc.subscribe("orders.*", queue="workers", cb=cb)
        pub = await nats.connect(servers=[URL], user="secret-user", password="hunter2")
        await pub.publish("orders.created", b"secret-payload-1")
        await pub.publish("orders.paid", b"secret-payload-2", headers={"traceparent": TP, "secret-hdr": "secret-hval"})
        await pub.flush(); await pub.close()
        await asyncio.sleep(0.3)
        await sub.unsubscribe()
        await nc.flush()
        print("got", got)
        await nc.close()
    elif what == "request":
        nc = await nats.connect(**opts)
        async def handler(m):
            await m.respond(b"secret-payload-reply")
        await nc.subscribe("svc.echo", cb=handler)
        r = await nc.request("svc.echo", b"secret-payload-req", timeout=2, headers={"traceparent": TP})
        print("reply", r.data)
        await nc.close()
    elif what == "verbose":
        nc = await nats.connect(**opts)
        await nc.publish("orders.created", b"secret-payload-v")
        await nc.publish("orders..bad", b"secret-payload-e")
        await nc.flush()
        await nc.close()

asyncio.run(main(sys.argv[1]))
