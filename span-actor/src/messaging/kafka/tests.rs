//! Kafka: conversations kafka-python 3.0 had with the Tansu broker
//! (`../testdata/kafka_*.txt`), then hostile and lost bytes.

use super::*;
use crate::messaging::testing::*;

#[test]
fn dump() {
    for f in ["kafka_produce_v9.txt", "kafka_produce_v9_gzip.txt", "kafka_fetch_v12.txt", "kafka_produce_v3.txt", "kafka_fetch_v5.txt", "kafka_produce_v6.txt", "kafka_fetch_v8.txt", "kafka_metadata_v12_create_topics.txt", "kafka_join_group_v7.txt"] {
        let mut t = T::new(MsgSystem::Kafka);
        let ts = t.replay(&testdata(f));
        t.c.close(&mut t.counts);
        eprintln!("== {f} {ts:?}\n{:#?}\n{:?}", t.ops.iter().map(brief).collect::<Vec<_>>(), t.counts);
    }
}
