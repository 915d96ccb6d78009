import sys, time, logging
from kafka import KafkaProducer, KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
B = "127.0.0.1:39093"
TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
try:
    a = KafkaAdminClient(bootstrap_servers=B, client_id="rt-admin")
    a.create_topics([NewTopic("orders", 1, 1)])
    a.close()
except Exception as e:
    print("admin", e)
p = KafkaProducer(bootstrap_servers=B, client_id="rt-producer", linger_ms=0)
for i in range(3):
    p.send("orders", key=b"secret-key", value=b"secret-payload-%d" % i, headers=[("traceparent", TP), ("secret-hdr", b"secret-hval")]).get(timeout=10)
p.flush(); p.close()
pg = KafkaProducer(bootstrap_servers=B, client_id="rt-gzip", compression_type="gzip", linger_ms=50)
fs = [pg.send("orders", value=b"secret-payload-z%d" % i) for i in range(4)]
for f in fs: f.get(timeout=10)
pg.close()
c = KafkaConsumer(bootstrap_servers=B, client_id="rt-consumer", group_id=sys.argv[1] if len(sys.argv) > 1 else None, auto_offset_reset="earliest", consumer_timeout_ms=3000)
if len(sys.argv) > 1:
    c.subscribe(["orders"])
else:
    c.assign([TopicPartition("orders", 0)]); c.seek_to_beginning()
n = 0
for m in c:
    n += 1
    print(m.offset, m.headers)
print("consumed", n)
c.close()
