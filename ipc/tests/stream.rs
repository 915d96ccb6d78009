//! A producer and consumers over real sockets: delivery once, acks that
//! settle the producer's tags, replay to a restarted consumer.

use std::path::PathBuf;
use std::time::Duration;

use ipc_schema::{Body, Component, HealthReport, Producer as Me};
use ringtail_ipc::{Access, Consumer, ConsumerOptions, Inbound, Producer, ProducerOptions, Settled};
use runtime_kit::counters::Registry;

fn body(n: u64) -> Body {
    Body::Health(HealthReport { component: Component::ProbeLoader, instance: n, points: Vec::new() })
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringtail-ipc-stream-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn consumer_options(dir: &std::path::Path, registry: &Registry, instance: u64) -> ConsumerOptions {
    ConsumerOptions {
        path: dir.join("data.sock"),
        acks: dir.join("ack.sock"),
        access: Access::private(),
        me: Me { component: Component::SpanActor, instance },
        producer: Component::ProbeLoader,
        capacity: 4,
        max_outstanding: 64,
        duplicates: registry.counter("dups", &[]),
        duplicate_items: |_| 1,
    }
}

async fn next_data(rx: &mut tokio::sync::mpsc::Receiver<Inbound>) -> (ringtail_ipc::MessageId, Body) {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a message in time").expect("open") {
            Inbound::Data { id, body } => return (id, body),
            Inbound::Transient(_) => {}
        }
    }
}

#[tokio::test]
async fn delivered_once_settled_by_acks_replayed_to_a_new_consumer() {
    let dir = dir();
    let registry = Registry::new(Component::ProbeLoader, 1);
    let options = ProducerOptions {
        path: dir.join("data.sock"),
        access: Access::private(),
        acks: dir.join("ack.sock"),
        me: Me { component: Component::ProbeLoader, instance: 42 },
        consumer: Component::SpanActor,
        capacity: 100,
        backlog_full: registry.drops("ringtail_dropped_events_total", "backlog_full"),
        publish_failed: registry.drops("ringtail_dropped_events_total", "publish_failed"),
    };
    let (producer, producer_task, mut settled) = Producer::<u64>::start(options, 16, &registry).await.unwrap();

    // First consumer: takes 1..=3, finishes only 1 and 2, then dies.
    let (trigger, shutdown) = runtime_kit::shutdown::channel();
    let (consumer, task, mut rx) = Consumer::start(consumer_options(&dir, &registry, 7), &registry, shutdown).await.unwrap();
    // Until the consumer's first ack arrives nothing is sent beyond the
    // window, and PUB drops what no subscriber takes: resends cover it.
    for tag in 1..=3u64 {
        producer.publish(body(tag), 1, tag).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        let (id, b) = next_data(&mut rx).await;
        let Body::Health(h) = b else { panic!("body") };
        assert_eq!(id.seq, h.instance, "in order, once");
        got.push(id);
    }
    consumer.done(got[0]);
    consumer.done(got[1]);
    for want in [1, 2] {
        let s = tokio::time::timeout(Duration::from_secs(10), settled.recv()).await.unwrap().unwrap();
        assert_eq!(s, Settled::Acked(want));
    }
    trigger.fire();
    consumer.close().await;
    assert!(task.join(Duration::from_secs(5)).await);
    drop(rx);

    // A restarted consumer gets 3 again (replayed once its first ack
    // arrives) and 4 (which may come first: the floor makes it wait for 3).
    let (_trigger, shutdown) = runtime_kit::shutdown::channel();
    let (consumer, task, mut rx) = Consumer::start(consumer_options(&dir, &registry, 8), &registry, shutdown).await.unwrap();
    producer.publish(body(4), 1, 4).await.unwrap();
    let mut seqs = Vec::new();
    for _ in [3, 4] {
        let (id, _) = next_data(&mut rx).await;
        seqs.push(id.seq);
        consumer.done(id);
    }
    seqs.sort();
    assert_eq!(seqs, [3, 4]);
    for want in [3, 4] {
        let s = tokio::time::timeout(Duration::from_secs(10), settled.recv()).await.unwrap().unwrap();
        assert_eq!(s, Settled::Acked(want));
    }
    producer.close(Duration::from_secs(2)).await.unwrap();
    assert!(producer_task.join(Duration::from_secs(5)).await, "the producer ends once its consumer has everything");
    consumer.close().await;
    assert!(task.join(Duration::from_secs(5)).await);
    let _ = std::fs::remove_dir_all(&dir);
}
