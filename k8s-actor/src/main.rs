//! `ringtail-k8s-actor`: watches the Kubernetes API for the pods of its
//! node and publishes their metadata. Runs with no privileges; see the
//! library docs (`k8s_actor`) for the layout.

use anyhow::Context;
use ipc_schema::{endpoints, Component};
use k8s_actor::derive::Rules;
use k8s_actor::publish::Publisher;
use k8s_actor::table::{Dropped, Limits, NodeTable};
use k8s_actor::watch::{self, Watch};
use k8s_actor::K8sError;
use ringtail_config::kubernetes::NODE_NAME_ENV;
use runtime_kit::component::{Process, Runtime};

runtime_kit::component_main!(
    Component::K8sActor,
    Runtime::CurrentThread,
    "Watches the Kubernetes API for this node's pods and publishes their metadata.",
    check = node,
    run
);

/// The node watched, when Kubernetes metadata is on.
fn node(settings: &ringtail_config::Settings) -> anyhow::Result<Option<String>> {
    let k = &settings.kubernetes;
    if !k.active() {
        return Ok(None);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let env = std::env::var(NODE_NAME_ENV).ok();
    Ok(Some(k.node(env.as_deref(), &host).ok_or(K8sError::Node)?))
}

async fn run(p: Process, node: Option<String>) -> anyhow::Result<()> {
    let settings = &p.settings;
    let runtime_dir = &settings.pipeline.runtime_dir;
    let Some(node) = node else {
        // Off (systemd starts the unit regardless; the supervisor does not
        // start it at all): what an earlier run published must not be
        // taken for this node's pods.
        for f in [endpoints::k8s_snapshot(runtime_dir), endpoints::k8s_health(runtime_dir)] {
            let _ = std::fs::remove_file(f);
        }
        tracing::info!(event = "disabled", "Kubernetes metadata is off (kubernetes.enabled, not in a cluster): nothing to do");
        p.ready();
        return Ok(());
    };
    // TLS to the API server is rustls on ring (as the exporter's gRPC):
    // installed for the process, since more than one provider is built in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let k = &settings.kubernetes;
    let publisher = Publisher::open(&endpoints::k8s_dir(runtime_dir))?;
    let client = watch::client(k).await?;
    let limits = Limits {
        node: node.clone(),
        rules: Rules { well_known_labels: k.well_known_labels },
        max_pods: k.max_pods,
        grace: k.deleted_grace,
    };
    let table = NodeTable::new(limits, Dropped::new(&p.registry));
    p.serve_profiles().await?;
    tracing::info!(
        %node,
        kubeconfig = %k.kubeconfig.display(),
        dir = %publisher.path().display(),
        event = "watching",
        "watching the pods of this node"
    );
    Watch::new(client, node, table, publisher, &p.registry, p.instance)
        .run(p.shutdown.clone(), || p.ready())
        .await
        .context("the watch stopped")?;
    Ok(())
}
