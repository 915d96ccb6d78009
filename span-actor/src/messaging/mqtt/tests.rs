//! MQTT: conversations paho-mqtt 2.2 had with mosquitto 2.0
//! (`../testdata/mqtt*.txt`), then hostile and lost bytes.

use super::*;
use crate::messaging::testing::*;

#[test]
fn dump() {
    for f in ["mqtt311_publisher.txt", "mqtt311_subscriber.txt", "mqtt5_publisher.txt", "mqtt5_subscriber.txt"] {
        let mut t = T::new(MsgSystem::Mqtt);
        let ts = t.replay(&testdata(f));
        t.c.close(&mut t.counts);
        eprintln!("== {f} {ts:?}\n{:#?}\n{:?}", t.ops.iter().map(brief).collect::<Vec<_>>(), t.counts);
    }
}
