"""pika (BlockingConnection) against RabbitMQ through the recording proxy:
one connection per conversation (argv[1]): publish, consume, missing."""
import sys, pika
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
P = pika.ConnectionParameters("127.0.0.1", 35674, credentials=pika.PlainCredentials("secret-user", "hunter2"),
                           frame_max=4096)  # small frames: a 10 KB body takes three
c = pika.BlockingConnection(P)
what = sys.argv[1]
if what == "publish":
    ch = c.channel()
    ch.queue_declare("orders")
    ch.exchange_declare("billing", "direct")
    ch.queue_bind("orders", "billing", "invoice.created")
    # With a traceparent (and a secret header), without, to the default exchange and a named one.
    ch.basic_publish("", "orders", b"secret-payload-1",
                     pika.BasicProperties(headers={"traceparent": TP, "secret-hdr": "secret-hval", "n": 7, "t": {"x": [1, "secret-val"]}}))
    ch.basic_publish("", "orders", b"secret-payload-2")
    ch.basic_publish("billing", "invoice.created", b"secret-payload-3", pika.BasicProperties(content_type="text/plain", headers={"traceparent": TP}))
    # A second channel in confirm mode: each publish waits for the broker's ack.
    cc = c.channel()
    cc.confirm_delivery()
    cc.basic_publish("", "orders", b"secret-payload-4", pika.BasicProperties(headers={"traceparent": TP}))
    cc.basic_publish("", "orders", b"secret-payload-" + b"x" * 10_000)
    ch.close(); cc.close()
elif what == "consume":
    ch = c.channel()
    ch.queue_declare("orders")
    m, props, body = ch.basic_get("orders")           # get-ok
    ch.basic_ack(m.delivery_tag)
    n = [0]
    def on(chx, m, props, body):
        n[0] += 1
        if n[0] == 2:
            chx.basic_nack(m.delivery_tag, requeue=False)
        elif n[0] == 3:
            chx.basic_reject(m.delivery_tag, requeue=False)
        else:
            chx.basic_ack(m.delivery_tag)
        if n[0] >= 4:
            chx.stop_consuming()
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume("orders", on, consumer_tag="secret-ctag")
    ch.start_consuming()
    print("consumed", n[0], "get-empty:", ch.basic_get("orders"))  # get-empty
    ch.close()
elif what == "missing":
    ch = c.channel()
    ch.confirm_delivery()
    try:
        ch.basic_publish("no-such-exchange", "k", b"secret-payload-404")
    except Exception as e:
        print("error", repr(e))
    try:
        ch2 = c.channel()
        ch2.basic_publish("no-such-exchange", "k", b"secret-payload-405")
        ch2.queue_declare("orders", passive=True)
    except Exception as e:
        print("error", repr(e))
c.close()
