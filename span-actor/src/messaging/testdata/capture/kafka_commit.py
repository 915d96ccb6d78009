from kafka import KafkaConsumer, TopicPartition, OffsetAndMetadata
B = "127.0.0.1:39093"
c = KafkaConsumer(bootstrap_servers=B, client_id="rt-commit", group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
tp = TopicPartition("orders", 0)
c.assign([tp]); c.seek_to_beginning()
n = sum(1 for _ in c)
print("consumed", n)
c.commit({tp: OffsetAndMetadata(n, "secret-meta", -1)})
print("committed", c.committed(tp))
c.close()
