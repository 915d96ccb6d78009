import sys, time, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
v5 = sys.argv[1] == "5"
proto = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
got = []
def on_message(c, u, m): got.append((m.topic, m.qos))
sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="rt-sub-" + sys.argv[1], protocol=proto)
sub.username_pw_set("secret-user", "hunter2")
sub.on_message = on_message
sub.connect("127.0.0.1", 31884); sub.loop_start()
time.sleep(0.3)
sub.subscribe([("sensors/+/temp", 2)] if not v5 else [("sensors/+/temp", mqtt.SubscribeOptions(qos=2))])
time.sleep(0.3)
pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="rt-pub-" + sys.argv[1], protocol=proto)
pub.username_pw_set("secret-user", "hunter2")
pub.connect("127.0.0.1", 31884); pub.loop_start(); time.sleep(0.3)
for q in (0, 1, 2):
    props = None
    if v5:
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("traceparent", TP), ("secret-key", "secret-val")]
    pub.publish("sensors/k1/temp", b"secret-payload-%d" % q, qos=q, properties=props).wait_for_publish(5)
time.sleep(0.5)
pub.disconnect(); pub.loop_stop()
sub.unsubscribe("sensors/+/temp"); time.sleep(0.3)
sub.disconnect(); sub.loop_stop()
print("got", got)
