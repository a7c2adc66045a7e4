//! Dynamic destinations (SCSt's `StreamBridge`): send to destinations nobody configured.
//!
//! ```text
//! cargo run --example dynamic
//! ```

use binder_core::config::ConfigLoader;
use binder_core::runtime::App;

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    binder_embedded::link();
    // Only these destinations may be created on the fly; leave the list out to allow any.
    let config = ConfigLoader::new()
        .yaml_str("spring.cloud.stream.dynamicDestinations: [tenant-a, tenant-b]\n")
        .load()?;
    binder_core::runtime::init_logging(&config)?;
    let app = App::builder(config).start().await?;
    let publisher = app.publisher();
    for tenant in ["tenant-a", "tenant-b"] {
        publisher
            .send(tenant, &format!("report for {tenant}"))
            .await?;
        println!("sent to {tenant} (exchange declared on first use)");
    }
    match publisher.send("tenant-c", &"report").await {
        Err(e) => println!("refused: {e}"),
        Ok(()) => return Err("tenant-c should have been refused".into()),
    }
    app.shutdown().await;
    println!("summary: sent=2 refused=1");
    Ok(())
}
