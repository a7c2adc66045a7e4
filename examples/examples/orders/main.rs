//! The order-processing demo: an order is placed, stock is reserved, an invoice is created,
//! then a coupon is granted and an SMS sent, off the main path. Five services run in one
//! process on the embedded broker; one of them fails on suspicious orders, retries, and
//! dead-letters them.
//!
//! ```text
//! cargo run --example orders
//! ```
//!
//! The wiring is in `application.yaml` beside this file (or the file `STREAM_CONFIG` names).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, FailureAction, HandlerError, RunningApp, State};
use serde::{Deserialize, Serialize};
use stream_macros::{input, output, stream_listener};

const ORDERS: u32 = 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u32,
    region: String,
    sku: String,
    quantity: u32,
    total: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reservation {
    order: Order,
    warehouse: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Invoice {
    order_id: u32,
    number: String,
    amount: f64,
}

/// What the services did, for the summary line.
#[derive(Debug, Default)]
struct Counts {
    placed: AtomicU32,
    reserved: AtomicU32,
    invoiced: AtomicU32,
    couponed: AtomicU32,
    notified: AtomicU32,
    dead_lettered: AtomicU32,
    changed: tokio::sync::Notify,
}

impl Counts {
    fn bump(&self, counter: &AtomicU32) {
        counter.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    fn get(&self) -> [u32; 6] {
        [
            &self.placed,
            &self.reserved,
            &self.invoiced,
            &self.couponed,
            &self.notified,
            &self.dead_lettered,
        ]
        .map(|c| c.load(Ordering::SeqCst))
    }
}

// ---- bindings -----------------------------------------------------------------------------

#[output("placed-out")]
#[derive(Debug)]
struct PlacedOut;

#[input("placed-in")]
#[derive(Debug)]
struct PlacedIn;

#[output("reserved-out")]
#[derive(Debug)]
struct ReservedOut;

#[input("reserved-in")]
#[derive(Debug)]
struct ReservedIn;

#[output("invoices-out")]
#[derive(Debug)]
struct InvoicesOut;

#[input("coupons-in")]
#[derive(Debug)]
struct CouponsIn;

#[input("sms-in")]
#[derive(Debug)]
struct SmsIn;

// ---- services -----------------------------------------------------------------------------

/// stock-service: reserves stock for each placed order.
#[stream_listener(input = PlacedIn, output = ReservedOut)]
async fn reserve_stock(order: Order, counts: State<Counts>) -> Reservation {
    let warehouse = if order.region == "eu" {
        "Rotterdam"
    } else {
        "Memphis"
    };
    println!(
        "[stock]   reserved {} x {} for order {} in {warehouse}",
        order.quantity, order.sku, order.id
    );
    counts.bump(&counts.reserved);
    Reservation {
        order,
        warehouse: warehouse.to_owned(),
    }
}

/// invoice-service: invoices reserved orders; refuses suspicious totals (retried, then
/// dead-lettered to `stock-reserved.invoicing.dlq`).
#[stream_listener(input = ReservedIn, output = InvoicesOut)]
async fn create_invoice(
    reservation: Reservation,
    counts: State<Counts>,
) -> Result<Invoice, HandlerError> {
    let order = reservation.order;
    if order.total > 1_000.0 {
        println!(
            "[invoice] order {} looks suspicious ({:.2}): refusing",
            order.id, order.total
        );
        return Err(HandlerError::retryable(format!(
            "order {} total {:.2} exceeds the fraud limit",
            order.id, order.total
        )));
    }
    counts.bump(&counts.invoiced);
    let number = format!("INV-{:05}", order.id);
    println!(
        "[invoice] {number} for order {}: {:.2}",
        order.id, order.total
    );
    Ok(Invoice {
        order_id: order.id,
        number,
        amount: order.total,
    })
}

/// coupon-service: grants a coupon for each invoice.
#[stream_listener(input = CouponsIn)]
async fn grant_coupon(invoice: Invoice, counts: State<Counts>) {
    let percent = if invoice.amount > 100.0 { 10 } else { 5 };
    println!("[coupon]  {percent}% coupon for order {}", invoice.order_id);
    counts.bump(&counts.couponed);
}

/// sms-service: texts the customer.
#[stream_listener(input = SmsIn)]
async fn send_sms(invoice: Invoice, counts: State<Counts>) {
    println!(
        "[sms]     \"Your order {} is confirmed, invoice {}\"",
        invoice.order_id, invoice.number
    );
    counts.bump(&counts.notified);
}

// ---- the process --------------------------------------------------------------------------

fn config() -> Result<StreamConfig, binder_core::config::ConfigError> {
    let loader = ConfigLoader::new();
    if std::env::var_os("STREAM_CONFIG").is_some() {
        return loader.load();
    }
    loader
        .file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/orders/application.yaml"
        ))
        .load()
}

async fn start(
    config: &StreamConfig,
    bindings: &[&str],
    counts: &Arc<Counts>,
    build: impl FnOnce(binder_core::runtime::AppBuilder) -> binder_core::runtime::AppBuilder,
) -> Result<RunningApp, Box<dyn std::error::Error + Send + Sync>> {
    // Every service counts into the same totals.
    let builder = App::builder(config.select(bindings)).shared_state(counts.clone());
    Ok(build(builder).start().await?)
}

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Both binders are available; the configuration picks one
    // (SPRING_CLOUD_STREAM_DEFAULTBINDER=rabbit runs the same services on RabbitMQ).
    binder_embedded::link();
    binder_rabbit::link();
    let config = config()?;
    // Logs to stderr (RUST_LOG or logging.level.* choose what), as run_service does.
    binder_core::runtime::init_logging(&config)?;
    let counts = Arc::new(Counts::default());

    let stock = start(&config, &["placed-in", "reserved-out"], &counts, |b| {
        b.register(&reserve_stock_listener)
    })
    .await?;
    // Two invoicing instances in one group compete for reservations.
    let mut invoicing = Vec::new();
    for _ in 0..2 {
        let c = counts.clone();
        invoicing.push(
            start(&config, &["reserved-in", "invoices-out"], &counts, |b| {
                b.register(&create_invoice_listener).on_error(move |f| {
                    if f.action == FailureAction::Republished {
                        println!(
                            "[invoice] gave up after {} attempts, dead-lettered: {}",
                            f.attempts, f.error
                        );
                        c.bump(&c.dead_lettered);
                    }
                })
            })
            .await?,
        );
    }
    let coupons = start(&config, &["coupons-in"], &counts, |b| {
        b.register(&grant_coupon_listener)
    })
    .await?;
    let sms = start(&config, &["sms-in"], &counts, |b| {
        b.register(&send_sms_listener)
    })
    .await?;
    let orders = start(&config, &["placed-out"], &counts, |b| {
        b.output(PlacedOut::NAME)
    })
    .await?;

    // order-service: place a bounded workload; every sixth order is suspicious.
    let out = orders.output(PlacedOut::NAME).expect("declared above");
    for id in 1..=ORDERS {
        let order = Order {
            id,
            region: if id % 2 == 0 { "eu" } else { "us" }.to_owned(),
            sku: format!("SKU-{}", 100 + id % 4),
            quantity: 1 + id % 3,
            total: if id % 6 == 0 {
                5_000.0
            } else {
                20.0 * f64::from(id)
            },
        };
        println!(
            "[orders]  placed order {id} ({}, {:.2})",
            order.region, order.total
        );
        out.send(&order).await?;
        counts.bump(&counts.placed);
    }

    // Wait until every order went all the way, or was dead-lettered.
    let done = |c: [u32; 6]| {
        let [placed, reserved, invoiced, couponed, notified, dead] = c;
        reserved == placed
            && invoiced + dead == placed
            && couponed == invoiced
            && notified == invoiced
    };
    let finished = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let changed = counts.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(counts.get()) {
                break;
            }
            changed.await;
        }
    })
    .await
    .is_ok();

    for app in [orders, stock, coupons, sms].into_iter().chain(invoicing) {
        app.shutdown().await;
    }
    let [placed, reserved, invoiced, couponed, notified, dead] = counts.get();
    println!(
        "summary: placed={placed} reserved={reserved} invoiced={invoiced} couponed={couponed} notified={notified} dead-lettered={dead}"
    );
    if !finished {
        return Err("the demo did not complete within 30 s".into());
    }
    Ok(())
}
