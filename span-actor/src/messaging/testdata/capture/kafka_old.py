import sys
from kafka import KafkaProducer, KafkaConsumer, TopicPartition
B = "127.0.0.1:39093"; V = tuple(int(x) for x in sys.argv[1].split("."))
TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
p = KafkaProducer(bootstrap_servers=B, client_id="rt-old", api_version=V, enable_idempotence=False)
for i in range(2):
    p.send("orders", value=b"secret-payload-o%d" % i, headers=[("traceparent", TP)]).get(timeout=10)
p.close()
c = KafkaConsumer(bootstrap_servers=B, client_id="rt-oldc", api_version=V, auto_offset_reset="earliest", consumer_timeout_ms=2000)
c.assign([TopicPartition("orders", 0)]); c.seek_to_beginning()
print("consumed", sum(1 for _ in c)); c.close()
